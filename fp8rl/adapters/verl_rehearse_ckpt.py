"""A run's chain of jobs through verl 0.9.1's own checkpoint code on CPU: the `checkpoint` step of a
rehearsal (fp8rl.adapters.verl_rehearse) and of test_adapters_verl_ckpt.py.

A paper run is a chain of Slurm jobs: one is killed at its time limit, the next resumes from the last
save. `rehearse_chain` runs the job's trainer three times, each "job" in a fresh Python process as on
the cluster: once uninterrupted over `3S` steps (`S`: the job's `trainer.save_freq`), then as a chain of
two jobs, the first killed during step `2S + 1` (after verl logged it, before it saved it), the second
resuming and running to step `3S`; between them, and when the second ends, the job script's own
`prune_saves` (fp8rl.adapters.verl_launch). What runs is verl's: Hydra composes `ppo_megatron_trainer`
with every override of the job (`verl_overrides.json`), and the v1 trainer class the job dispatches to
(`PPOTrainerSync`), built without its `__init__`, runs its own `_init_tokenizer`, `_init_dataloader`
(verl's RL dataset, `create_rl_sampler`, torchdata's `StatefulDataLoader`), `_load_checkpoint`
(`resume_mode`, `find_latest_ckpt_path`, the dataloader's `data.pt`), `_next_train_batch` and
`_save_checkpoint` (`latest_checkpointed_iteration.txt`, `max_actor_ckpt_to_keep`, the checkpoint
callback), and each step's metrics go through verl's `FileLogger` to the attempt's log, as the job
script names it, and back through fp8rl's import of the attempts (`import_logs`).

Stand-ins, and what they leave unrehearsed: the actor worker group (no Megatron training on a CPU) is
`StandInActor`, whose "update" hashes the step's prompts into its state, with fp8rl's step bookkeeping
(fp8rl.adapters.verl_update `wrap`, as on verl's `TrainingWorker`). Its state is saved under
`global_step_N/actor/` and loaded either as a JSON file (`actor="stand-in"`) or, with `megatron`, by
verl's own Megatron checkpoint manager in the paper's layout (the Hugging Face tree through the bridge,
optimizer and RNG states in megatron-core's dist_ckpt; fp8rl.adapters.verl_rehearse_megatron, which
also reads the saves left as the job script does and exports the last). The job's data is its own `train.parquet` rows repeated (each prompt made distinct) to
`2S` steps of `data.train_batch_size` prompts plus a few, so the second job resumes at an epoch's
end and draws the next epoch's first batch; `data.train_files`, `data.val_files` and
`trainer.default_local_dir` point at this rehearsal's folder (and the model path at the rehearsal's
model), every other override is the job's.

The chain passes when every step's prompts, actor state and fp8rl step equal the uninterrupted run's,
the imported metrics are the same rows, the second job resumed at step `2S`, and the saves left are
the two the script keeps; with `megatron`, also when verl's own retention left no more actor saves
than `max_actor_ckpt_to_keep` during the second job (fp8rl.adapters.verl_retention), and the last save
exports.

`checkpoint_step` is the rehearsal's step: once per distinct set of the overrides a chain depends on.

    python -m fp8rl.adapters.verl_rehearse_ckpt OVERRIDES_JSON LAST SAVE_UNTIL OUT_JSON [stand-in|megatron]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fp8rl.adapters.verl_job_config import compose
from fp8rl.adapters.verl_launch import OVERRIDES_FILE
from fp8rl.adapters.verl_run import SCRIPT_FILE

STATE_FILE = "stand_in_actor.json"
PRUNE_RE = re.compile(r"^prune_saves\(\) \{\n.*?^\}\n", re.S | re.M)
EXTRA_ROWS = 5  # past the last whole batch of an epoch (verl drops it: drop_last)
CHAIN_TIMEOUT_S = 900  # per job


class StandInActor:
    """The methods of verl's actor worker group the trainer's checkpoint code and fp8rl's step
    bookkeeping call: `save_checkpoint`, `load_checkpoint` (a JSON state under the save's `actor/`),
    and an update (`train_mini_batch` → `train_batch`) that hashes the step's prompts into the state."""

    def __init__(self) -> None:
        self.state = "0" * 16
        self.saved: list[int] = []

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, STATE_FILE), "w") as fh:
            json.dump({"state": self.state, "global_step": global_step}, fh)
        self.saved.append(int(global_step))

    def load_checkpoint(self, local_path, del_local_after_load=False):
        with open(os.path.join(local_path, STATE_FILE)) as fh:
            self.state = json.load(fh)["state"]

    def train_mini_batch(self, prompts: list[str]) -> None:
        self.train_batch(prompts)

    def train_batch(self, prompts: list[str]) -> None:
        self.state = hashlib.sha256((self.state + "\n".join(prompts)).encode()).hexdigest()[:16]


def _digest(prompts: list[str]) -> str:
    return hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]


def run_job(overrides: list[str], last: int, save_until: int, actor: str = "stand-in") -> dict:
    """One job: verl's trainer resumes (or starts), runs steps to `last`, saves at verl's cadence up to
    step `save_until` (a later step is "killed" before its save), logs each step through verl's
    `FileLogger` to `$VERL_FILE_LOGGER_PATH`; its steps' records and where it resumed. `actor`:
    `stand-in` (`StandInActor`'s JSON state) or `megatron` (verl's Megatron checkpoint manager,
    fp8rl.adapters.verl_rehearse_megatron)."""
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
    from verl.trainer.ppo.utils import need_critic
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils.tracking import FileLogger

    from fp8rl.adapters import verl_update

    config = compose(overrides)
    trainer = PPOTrainerSync.__new__(PPOTrainerSync)
    # what PPOTrainer.__init__ sets that these methods read (the rest of it starts TransferQueue)
    trainer.config = config
    trainer.checkpoint_callback = build_checkpoint_callback(config)
    trainer.use_critic = need_critic(config)
    trainer.trainer_mode = config.trainer.v1.trainer_mode
    trainer.parameter_sync_step = config.trainer.v1.get(trainer.trainer_mode, {}).get(
        "parameter_sync_step", 1
    )
    if actor == "megatron":
        import fp8rl.adapters.verl_loss  # noqa: F401  (what VERL_USE_EXTERNAL_MODULES imports in every worker)
        from fp8rl.adapters.verl_rehearse_megatron import megatron_actor_class

        actor_cls = verl_update.wrap(megatron_actor_class(StandInActor))
        trainer.actor_rollout_wg = actor_cls()
        trainer.actor_rollout_wg.attach(config, str(config.actor_rollout_ref.model.path))
    else:
        actor_cls = verl_update.wrap(type("StandInActorWorker", (StandInActor,), {}))
        trainer.actor_rollout_wg = actor_cls()
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer._load_checkpoint()
    resumed = trainer.global_steps
    logger = FileLogger(config.trainer.project_name, config.trainer.experiment_name)
    save_freq, total = int(config.trainer.save_freq), int(trainer.total_training_steps)
    records = []
    for step in range(resumed + 1, last + 1):
        trainer.global_steps = step
        batch = trainer._next_train_batch()
        prompts = [json.dumps(p, sort_keys=True, default=str) for p in batch["raw_prompt"]]
        trainer.actor_rollout_wg.train_mini_batch(prompts)
        state = trainer.actor_rollout_wg.state
        record = {"step": step, "prompts": _digest(prompts), "actor": state,
                  "fp8rl_step": verl_update.POSITION.step}  # fmt: skip
        records.append(record)
        # a number from the state, under a name the import keeps, so the rows show the actor's path
        logger.log(data={"actor/clip/low_neg": int(state[:8], 16) / 16**8, "actor/ratio/p50": float(step)},
                   step=step)  # fmt: skip
        if step <= save_until and save_freq > 0 and (step >= total or step % save_freq == 0):
            trainer._save_checkpoint()
    logger.finish()
    return {"resumed": resumed, "records": records, "saved": trainer.actor_rollout_wg.saved}


def _job_data(run_dir: Path, work: Path, rows_needed: int) -> tuple[Path, Path]:
    """The job's train/test parquet rows repeated to `rows_needed` distinct prompts (module docstring)."""
    import pandas as pd

    work.mkdir(parents=True, exist_ok=True)
    out = []
    for split, n in (("train", rows_needed), ("test", 4)):
        df = pd.read_parquet(run_dir / "verl_data" / f"{split}.parquet")
        rows = []
        for i in range(n):
            row = df.iloc[i % len(df)].to_dict()
            row["prompt"] = [dict(m) for m in row["prompt"]]
            row["prompt"][-1]["content"] = f"{row['prompt'][-1]['content']} (rehearsal prompt {i})"
            rows.append(row)
        path = work / f"{split}.parquet"
        pd.DataFrame(rows).to_parquet(path)
        out.append(path)
    return out[0], out[1]


def _prune(script: Path, ckpt: Path) -> None:
    """The job script's `prune_saves`, run as the script runs it."""
    m = PRUNE_RE.search(script.read_text())
    if not m:
        raise RuntimeError(f"{script}: no prune_saves function")
    subprocess.run(["bash", "-c", m[0] + "prune_saves"], check=True, timeout=60)


def _spawn(
    overrides: list[str], last: int, save_until: int, log: Path, work: Path, timeout_s: int,
    megatron: Path | None = None,
) -> dict:  # fmt: skip
    spec, out = work / f"job-{log.stem}.json", work / f"result-{log.stem}.json"
    spec.write_text(json.dumps(overrides))
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log), OMP_NUM_THREADS="1")
    actor = "stand-in"
    if megatron is not None:  # megatron-core's sources after verl's environment
        actor, env["PYTHONPATH"] = (
            "megatron",
            os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(megatron)])),
        )
    res = subprocess.run(
        [sys.executable, "-m", "fp8rl.adapters.verl_rehearse_ckpt", str(spec), str(last), str(save_until), str(out),
         actor],
        env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if res.returncode != 0 or not out.is_file():
        raise RuntimeError(f"job {log.stem} exited {res.returncode}:\n{(res.stdout + res.stderr)[-3000:]}")
    return json.loads(out.read_text())


def rehearse_chain(
    run_dir: Path,
    work: Path,
    base: Path | None = None,
    timeout_s: int = CHAIN_TIMEOUT_S,
    megatron: bool = False,
) -> tuple[bool, str]:
    """Run the chain of the module docstring for the run files under `run_dir` (`base`: the model
    folder the tokenizer is read from, when the job names a hub id): `(ok, what it found)`. With
    `megatron` the actor saves and loads through verl's Megatron checkpoint manager, and the saves left
    are read as the job script reads them (fp8rl.adapters.verl_rehearse_megatron)."""
    import shutil

    from fp8rl.adapters.verl_metrics import import_logs

    run_dir, work = Path(run_dir), Path(work)
    shutil.rmtree(work, ignore_errors=True)
    overrides = json.loads((run_dir / OVERRIDES_FILE).read_text())["overrides"]
    keyed = dict(o.split("=", 1) for o in overrides)
    save_freq, batch = int(keyed["trainer.save_freq"]), int(keyed["data.train_batch_size"])
    train, test = _job_data(run_dir, work / "data", batch * 2 * save_freq + EXTRA_ROWS)
    ckpt = work / "verl_checkpoints"
    local = {
        "data.train_files": str(train),
        "data.val_files": str(test),
        "trainer.default_local_dir": str(ckpt),
    }
    if base is not None:
        local["actor_rollout_ref.model.path"] = str(base)
    job = [f"{k}={local[k]}" if k in local else o for o, k in ((o, o.split("=", 1)[0]) for o in overrides)]
    script_text = (run_dir / SCRIPT_FILE).read_text().replace(keyed["trainer.default_local_dir"], str(ckpt))
    script = work / SCRIPT_FILE
    script.write_text(script_text)
    logs = work / "verl_logs"
    logs.mkdir(parents=True, exist_ok=True)
    s, last = save_freq, 3 * save_freq
    site = None
    if megatron:
        from fp8rl.adapters.verl_rehearse_megatron import megatron_site

        site = megatron_site(work)
        if site is None:
            return False, "no megatron-core sources (scripts/upstream_src.sh makes build/upstream)"

    def spawn(last_step: int, save_until: int, name: str) -> dict:
        return _spawn(job, last_step, save_until, logs / f"{name}.jsonl", work, timeout_s, site)

    whole = spawn(last, last, "uninterrupted")
    for d in ckpt.glob("*"):
        subprocess.run(["rm", "-rf", str(d)], check=True)
    _prune(script, ckpt)
    first = spawn(2 * s + 1, 2 * s, "attempt-001")  # killed in step 2S+1
    _prune(script, ckpt)  # the next job's script, before verl starts
    second = spawn(last, last, "attempt-002")
    # what verl's own retention left of the actor's saves (the first job's included), before the script's
    # prune at the job's end
    verl_kept = sorted(int(p.parent.name.removeprefix("global_step_")) for p in ckpt.glob("global_step_*/actor")
                       if any(p.iterdir()))  # fmt: skip
    _prune(script, ckpt)  # its end

    problems = []
    chain = [r for r in first["records"] if r["step"] <= second["resumed"]] + second["records"]
    if second["resumed"] != 2 * s:
        problems.append(f"the second job resumed at step {second['resumed']}, not {2 * s}")
    for want, got in zip(whole["records"], chain, strict=False):
        if want != got:
            problems.append(f"step {want['step']}: uninterrupted {want}, resumed chain {got}")
            break
    if len(chain) != len(whole["records"]):
        problems.append(f"{len(chain)} steps in the chain, {len(whole['records'])} uninterrupted")
    wrong_step = [r for r in chain if r["fp8rl_step"] != r["step"]]
    if wrong_step:
        problems.append(f"fp8rl's step bookkeeping after the resume: {wrong_step[0]}")
    rows_whole = import_logs([logs / "uninterrupted.jsonl"], work / "metrics_uninterrupted.jsonl")
    rows_chain = import_logs([logs / "attempt-001.jsonl", logs / "attempt-002.jsonl"], work / "metrics.jsonl")
    if rows_whole != rows_chain:
        problems.append("the imported metrics of the chain differ from the uninterrupted run's")
    left = sorted(int(p.name.removeprefix("global_step_")) for p in ckpt.glob("global_step_*"))
    if left != [last - s, last]:
        problems.append(f"saves left {left}, the script keeps {[last - s, last]}")
    keep = int(keyed.get("trainer.max_actor_ckpt_to_keep", "0") or 0)
    if megatron and keep and len(verl_kept) > keep:
        problems.append(
            f"verl's checkpoint manager left the actor saves {verl_kept} of the chain on disk during the second "
            f"job, more than max_actor_ckpt_to_keep={keep}"
        )
    if megatron and not problems:
        from fp8rl.adapters.verl_rehearse_megatron import check_saves

        tokenizer_dir = Path(base) if base is not None else Path(keyed["actor_rollout_ref.model.path"])
        problems += check_saves(ckpt, tokenizer_dir, work, chain[-1]["actor"])
    if problems:
        return False, "; ".join(problems)
    layout = (
        "verl's Megatron checkpoint manager (model/huggingface through the bridge, optimizer and RNG "
        f"in megatron-core dist_ckpt) saved and loaded the actor, its retention kept {verl_kept} in the "
        "second job, the last save's export holds the last step's weights; "
        if megatron
        else ""
    )
    return True, layout + (
        f"{last} steps of {batch} prompts (save_freq {s}) as one job and as two, the first killed in step "
        f"{2 * s + 1}: the second resumed at step {2 * s} through verl's _load_checkpoint, every step's "
        f"prompts (the second epoch's first batch included), stand-in actor state and fp8rl step equal, "
        f"{len(rows_chain)} metric rows imported equal, saves left {left}"
    )


# the overrides a job's checkpoint chain depends on, less its own paths and names
CHAIN_KEYS = ("trainer.", "data.", "algorithm.filter_groups")
CHAIN_OWN = ("trainer.default_local_dir", "trainer.experiment_name", "data.train_files", "data.val_files")
CHAIN_DONE = "rehearsal_checkpoint_done"  # under the rehearsal's working directory: one file per chain


def checkpoint_step(
    out: Path, base: Path | None = None, timeout_s: int = CHAIN_TIMEOUT_S
) -> tuple[bool, str]:
    """`(ok, what it found)` of the rehearsal's step 4 (fp8rl.adapters.verl_rehearse): the job killed at
    its time limit and resumed (`rehearse_chain`). Run once per distinct set of the trainer and data
    overrides a chain depends on (`CHAIN_KEYS`) in one working directory; a job with a set already
    rehearsed names the job that rehearsed it. The actor saves through verl's Megatron checkpoint
    manager where megatron-core's pinned sources are (build/upstream), else as the JSON stand-in."""
    overrides = json.loads((out / OVERRIDES_FILE).read_text())
    keys = sorted(
        o for o in overrides["overrides"] if o.startswith(CHAIN_KEYS) and not o.startswith(CHAIN_OWN)
    )
    done = out.parent / CHAIN_DONE / (hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16] + ".json")
    if done.is_file():
        earlier = json.loads(done.read_text())
        return earlier["ok"], f"as {earlier['run_id']} (the same trainer and data settings)"
    from fp8rl.adapters.verl_rehearse_megatron import has_megatron_sources

    work = out / "rehearsal_checkpoint"
    megatron = has_megatron_sources()
    ok, detail = rehearse_chain(out, work, base, timeout_s=timeout_s, megatron=megatron)
    if not megatron:
        detail += " (the JSON stand-in actor: no megatron-core sources, scripts/upstream_src.sh)"
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps({"run_id": overrides["run_id"], "ok": ok}))
    return ok, detail


def main(spec: str, last: str, save_until: str, out: str, actor: str = "stand-in") -> None:
    overrides = json.loads(Path(spec).read_text())
    result = run_job(overrides, int(last), int(save_until), actor)
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:6])
