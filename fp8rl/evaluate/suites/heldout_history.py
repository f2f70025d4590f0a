"""`heldout_history`: the held-out bf16 endpoint over training -> `eval/heldout_history.json`.

With `schedule.keep_every: N` the trainer keeps the policy's weights every N steps
(`checkpoints/step{N:05d}/`); this suite scores each of them as `heldout` scores the final checkpoint
(fp8rl.engine.heldout: the bf16 sampler, prompts no split holds, the same draws for every checkpoint),
so the report can draw each arm's held-out curve from its base (step 0) to its end
(fp8rl.report.heldout_curve). On by itself wherever `eval.heldout` and `schedule.keep_every` are both
set; it reads checkpoints only, so it retrains nothing.

The result file is the schema's document (fp8rl.evaluate.schema) for the run's final checkpoint with no
`results` of its own (the final checkpoint's scores are `heldout`'s) and a `history`: one entry per kept
checkpoint, in step order, each with its `step`, `checkpoint`, `checkpoint_digest` and `results` in the
schema's form. A run that stopped before its first kept step has an empty history.
"""

from __future__ import annotations

import re
from pathlib import Path

from fp8rl.evaluate.eval_tasks import EvalInputError
from fp8rl.evaluate.suites._registry import EvalSuite, SuiteJob, register_suite

KEPT_NAME = re.compile(r"step(\d+)")


def kept_checkpoints(run_root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every checkpoint the run kept (`checkpoints/step{N}/`), in step order; a
    folder of another name (a write the trainer staged and never finished) is not one."""
    from fp8rl.run_files import RunDir

    history = RunDir(run_root).history
    if not history.is_dir():
        return []
    kept = [
        (int(m.group(1)), p) for p in history.iterdir() if p.is_dir() and (m := KEPT_NAME.fullmatch(p.name))
    ]
    return sorted(kept)


def history_entry(step: int, checkpoint: Path, results: list, digest: str | None) -> dict:
    """One kept checkpoint's entry of `history`: its step, folder, fingerprint and scores (TaskResults)."""
    from dataclasses import asdict

    return {"step": step, "checkpoint": str(checkpoint), "checkpoint_digest": digest,
            "results": [asdict(r) for r in results]}  # fmt: skip


def write_history(out: Path, checkpoint: Path, history: list[dict], provenance: dict) -> Path:
    """The suite's result file (module docstring), written atomically."""
    from fp8rl.checkpoint_files import checkpoint_digest
    from fp8rl.evaluate.schema import eval_document
    from fp8rl.io import atomic_write_json

    doc = eval_document(
        checkpoint, "heldout_history", [], provenance, checkpoint_digest=checkpoint_digest(checkpoint)
    )
    return atomic_write_json(out, doc | {"history": history})


def run(job: SuiteJob) -> None:
    from fp8rl.checkpoint_files import CheckpointError, checkpoint_digest, verify_files
    from fp8rl.engine.heldout import heldout_rows, score_checkpoint
    from fp8rl.evaluate.schema import TaskResult
    from fp8rl.evaluate.suites.heldout import heldout_provenance
    from fp8rl.locks import hold_lock

    cfg, checkpoint, out = job.cfg, job.checkpoint, job.out
    if cfg.eval.heldout is None or cfg.schedule.keep_every is None:
        raise EvalInputError(
            "the held-out history needs eval.heldout and schedule.keep_every (e.g. `--set schedule.keep_every=50`)"
        )
    kept = kept_checkpoints(checkpoint.parent)
    try:  # every kept checkpoint's files as the trainer recorded them, before any is scored
        for _, folder in kept:
            if verify_files(folder, "retrain the run to keep it again") is None:
                raise CheckpointError(f"{folder}: no state.json; not a checkpoint the trainer kept")
        rows = heldout_rows(cfg, job.data)
    except (CheckpointError, ValueError) as exc:
        raise EvalInputError(str(exc)) from None
    history = []
    with hold_lock(out.with_name(f".{out.name}.lock"), "wait for that evaluation to end"):
        for step, folder in kept:
            scores = score_checkpoint(cfg, folder, rows)
            results = [TaskResult("heldout", s.metric, s.value, s.stderr, s.n) for s in scores]
            history.append(history_entry(step, folder, results, checkpoint_digest(folder)))
            scored = "  ".join(f"{r.metric} {r.value:.4f}" for r in results)
            print(f"heldout step {step:<6} {scored}")
        prov = heldout_provenance(cfg)
        prov["eval"]["keep_every"] = cfg.schedule.keep_every
        write_history(out, checkpoint, history, prov)
    if not kept:
        print(f"heldout history: {checkpoint.parent} kept no checkpoint (it stopped before step "
              f"{cfg.schedule.keep_every}, or trained without schedule.keep_every); wrote an empty history")  # fmt: skip


SUITE = register_suite(
    EvalSuite(
        name="heldout_history",
        command="heldout-history",
        help="the held-out bf16 endpoint of every kept checkpoint -> eval/heldout_history.json",
        usage="""
The held-out endpoint over training, for a config with `eval.heldout` and `schedule.keep_every`: scores
every checkpoint the run kept (`checkpoints/step{N}/` beside `--checkpoint`, the run's final one) as
`fp8rl eval heldout` scores one, with the same prompts and draws, and writes `--out` with each step's
greedy accuracy, sampled reward and answer-format rate; a run that stopped before its first kept
step gets an empty history. Exits 2 when either key is not set. For a run trained with
`--set schedule.keep_every=50` (the same key its evaluation is given):

    fp8rl eval heldout-history --config config/longform.yaml --set schedule.keep_every=50 \\
        --data results/longform/data \\
        --checkpoint results/longform/runs/grpo/story/bf16/none/none/seed0/checkpoint --out /tmp/history.json
""",
        run=run,
        enabled=lambda cfg: cfg.eval.heldout is not None and cfg.schedule.keep_every is not None,
        data="train",
        sections=("numerics", "eval", "task", "schedule"),
        role="train",
        rule="eval_heldout_history",
    )
)
