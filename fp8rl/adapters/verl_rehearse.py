"""Rehearse a verl training job on a CPU machine: its real job script, run with the real upstream code up
to the first point that needs a GPU (`fp8rl verl rehearse`).

`rehearse_run` writes the run's files as `fp8rl verl train` does (fp8rl.adapters.verl_run.write_run_files:
the same overrides, loss spec and job script), with one change: the script runs every command with this
interpreter on this machine instead of inside the train image. It then runs that script with bash. Its
steps run unchanged: the preflight (the checks of the GPU node and its image skipped, and said so), then
`python -m verl.trainer.main_ppo` with every override the script appends: Hydra composes verl's
`ppo_megatron_trainer`, verl validates it, `ray.init` starts a local Ray with the runtime_env the
overrides build, verl's task runner starts in a Ray worker, brings up TransferQueue, and builds the
trainer class verl dispatches to (`trainer.use_v1`, `trainer.v1.trainer_mode`), which loads the
tokenizer, builds the datasets and dataloaders, and asks Ray for its GPU resource pools. That request
is the first point that needs a GPU: in a rehearsal (`FP8RL_REHEARSAL=1`) fp8rl.adapters.rehearsal_hook,
as the `sitecustomize` on the script's `PYTHONPATH`, makes verl's `create_resource_pool` print `MARKER`
with the trainer class and the GPUs asked for, and stop. A run whose output holds the
marker reached it; anything that stops a job before (a crash in `ray.init`, an override Hydra or verl
refuses, a missing package) fails the rehearsal, with the output's tail.

Ray is told the job node's CPU count (`resources.train.threads`, through `RAY_OVERRIDE_RESOURCES`: what
TransferQueue's actors reserve must fit). Not rehearsed: the multi-node Ray start under Slurm (each
job runs here on one machine, asking for all its nodes' GPUs), and everything from the GPU workers on.

Without `--base` the model is a stand-in (`stand_in_model`: a character tokenizer with a ChatML template
and a two-layer config of the model's family); without `--data`, a few stand-in problems; a calib cell
with `calib.reference: run` gets a stand-in bf16 reference run. Ray runs ~10 processes per job; a job
takes ~30-60 s on two cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fp8rl.adapters import rehearsal_hook
from fp8rl.adapters.rehearsal_hook import MARKER, REHEARSAL_ENV
from fp8rl.adapters.verl_run import SCRIPT_FILE, verl_paths, write_run_files
from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec

MARKER_RE = re.compile(re.escape(MARKER) + r": trainer=(?P<trainer>\S+) gpus=(?P<gpus>\d+)")
SITE_DIR = "rehearsal_site"  # holds rehearsal_hook.py as sitecustomize.py
TIMEOUT_S = 900
TAIL_CHARS = 4000


# ----------------------------------------------------------------------------------------- stand-ins


def stand_in_model(out: Path, model_type: str = "qwen3") -> Path:
    """A model directory verl's tokenizer and config loaders read: a character-level tokenizer with a
    ChatML chat template (Qwen's format) and a two-layer config of `model_type` (no weights)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + [chr(c) for c in range(32, 127)] + ["\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token=specials[0], chat_template=template
    )
    fast.add_special_tokens({"additional_special_tokens": specials[1:]})
    fast.save_pretrained(out)
    arch = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(model_type, "Qwen3ForCausalLM")
    config = {"architectures": [arch], "model_type": model_type, "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "num_hidden_layers": 2, "vocab_size": len(vocab),
              "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
              "eos_token_id": vocab["<|im_end|>"], "pad_token_id": 0}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def stand_in_data(out: Path, n: int = 8) -> Path:
    """`train.jsonl` and `test.jsonl` of `n` problems in fp8rl's data schema (docs/interfaces.md)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [
            {"id": f"{split}-{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(n)
        ]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def stand_in_reference(out: Path) -> Path:
    """A finished bf16 run's `metrics.jsonl` with clip fractions, for a calib cell's targets."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "clip/low_neg": 0.02, "clip/high_pos": 0.01, "clip/low_all": 0.01} for s in (1, 2)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


# ---------------------------------------------------------------------------------------- the jobs


def job_types(cfg: ExperimentConfig) -> list[RunSpec]:
    """One run per (algorithm, variant, granularity) (what the overrides, the loss spec and the
    preflight see differently; seeds change values only) and per model (nodes, GPUs, parallelism,
    tokenizer family): the jobs that cover every job script's shape."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for spec in cfg.runs():
        kinds = {
            ("cell", spec.algo, spec.variant, spec.granularity, spec.condition or ""),
            ("model", spec.model),
        }
        if not kinds <= seen:
            seen |= kinds
            out.append(spec)
    return out


@dataclass(frozen=True)
class Rehearsal:
    """How one job's rehearsal ended: `reached_gpu` (its output holds the marker), the `trainer` class
    and `gpus` the marker names, the exit code, and the log."""

    run_id: str
    reached_gpu: bool
    trainer: str | None
    gpus: int | None
    exit_code: int
    log: Path

    def line(self) -> str:
        if self.reached_gpu:
            return f"{self.run_id}: reached the first GPU point ({self.trainer} asks for {self.gpus} GPUs)"
        tail = self.log.read_text(errors="replace")[-TAIL_CHARS:] if self.log.is_file() else ""
        how = "timed out (waiting for Ray resources?)" if self.exit_code == 124 else f"exit {self.exit_code}"
        return f"{self.run_id}: FAILED before its first GPU point ({how}; {self.log}):\n{tail}"


def _script_env(cfg: ExperimentConfig, site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "RAY_ADDRESS"}
    env[REHEARSAL_ENV] = "1"
    paths = [str(site)] + [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)  # absolute: the script runs in the run directory
    env["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": cfg.resources_for("train").threads})
    return env


def rehearse_run(
    cfg: ExperimentConfig,
    spec: RunSpec,
    work: Path,
    *,
    base: Path | None = None,
    data: Path | None = None,
    extra_overrides: list[str] | tuple[str, ...] = (),
    timeout_s: int = TIMEOUT_S,
) -> Rehearsal:
    """Write the run's files under `work/<run id>/` and run its job script to the first GPU point."""
    work = Path(work).resolve()
    out = work / spec.run_id.replace("/", "-")
    site = work / SITE_DIR
    site.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(rehearsal_hook.__file__, site / "sitecustomize.py")
    if base is None:
        family = "qwen2" if "2.5" in spec.model else "qwen3"
        base = stand_in_model(work / f"stand-in-{family}", family)
    data = data or stand_in_data(work / "stand-in-data")
    reference = stand_in_reference(work / "stand-in-reference") if spec.spec.calib else None
    # the job's caches (HF datasets' parquet cache) in the working directory, not the config's hub
    cfg = cfg.model_copy(update={"hub": cfg.hub.model_copy(update={"home": str(work / "hf_home")})})
    paths = verl_paths(cfg, spec, out, base)
    write_run_files(
        cfg, spec, paths, data=data, reference=reference, extra_overrides=extra_overrides,
        host_python=sys.executable,
    )  # fmt: skip
    log = out / "rehearsal.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            ["bash", str(out / SCRIPT_FILE)], cwd=out, env=_script_env(cfg, site), stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        finally:
            _kill_group(proc)
    m = MARKER_RE.search(log.read_text(errors="replace"))
    return Rehearsal(
        spec.run_id, m is not None, m["trainer"] if m else None, int(m["gpus"]) if m else None, rc, log
    )


def _kill_group(proc: subprocess.Popen) -> None:
    """End what the script left running (Ray's processes are in its session)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
