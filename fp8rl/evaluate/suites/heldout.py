"""`heldout`: the held-out bf16 endpoint of `eval.heldout` (fp8rl.engine.heldout) -> `eval/heldout.json`:
the checkpoint sampled with the bf16 sampler, whatever the run's variant, on prompts that neither
train.jsonl nor test.jsonl of the data folder holds (greedy accuracy, the sampled reward at the training
temperature, the answer-format rate). It reads the checkpoint only, so adding it never retrains a run;
the DAG scores each base the runs start from too, so every run's gain over its own base is known."""

from __future__ import annotations

from fp8rl.evaluate.eval_tasks import EvalInputError
from fp8rl.evaluate.suites._registry import EvalSuite, SuiteJob, register_suite


def heldout_provenance(cfg) -> dict:
    """A held-out result's provenance: the run's and, under `eval`, how the endpoint sampled."""
    from fp8rl.provenance import provenance

    prov = provenance(config_digest=cfg.digest())
    prov["eval"] = {
        "sampler": "bf16-emulated",
        **cfg.eval.heldout.model_dump(),
        "temperature": cfg.schedule.temperature,
        "max_new_tokens": cfg.schedule.max_new_tokens,
    }
    return prov


def run(job: SuiteJob) -> None:
    from fp8rl.checkpoint_files import CheckpointError, checkpoint_digest, verify_files
    from fp8rl.engine.heldout import heldout_rows, score_checkpoint
    from fp8rl.evaluate.schema import TaskResult, write_eval
    from fp8rl.locks import hold_lock

    cfg, checkpoint, out = job.cfg, job.checkpoint, job.out
    if cfg.eval.heldout is None:
        raise EvalInputError("eval.heldout is not set (e.g. `--set eval.heldout.prompts=512`)")
    if not (checkpoint / "config.json").is_file():
        raise EvalInputError(f"--checkpoint {checkpoint}: not a model checkpoint (no config.json)")
    try:  # the files the trainer recorded, byte for byte (a base records none: not checked)
        verify_files(checkpoint, "retrain the run, or restore the checkpoint")
        rows = heldout_rows(cfg, job.data)
    except (CheckpointError, ValueError) as exc:
        raise EvalInputError(str(exc)) from None
    with hold_lock(out.with_name(f".{out.name}.lock"), "wait for that evaluation to end"):
        scores = score_checkpoint(cfg, checkpoint, rows)
        results = [TaskResult("heldout", s.metric, s.value, s.stderr, s.n) for s in scores]
        prov = heldout_provenance(cfg)
        write_eval(out, checkpoint, "heldout", results, prov, checkpoint_digest=checkpoint_digest(checkpoint))
    for r in results:
        print(f"heldout  {r.metric:<16} {r.value:.4f} ± {r.stderr:.4f}  (n={r.n})")


SUITE = register_suite(
    EvalSuite(
        name="heldout",
        command="heldout",
        help="the held-out bf16 endpoint of eval.heldout -> eval/heldout.json",
        usage="""
The held-out endpoint of a config with `eval.heldout`: reads the checkpoint and samples it with the
bf16 sampler, whatever the run's variant, on prompts that neither `train.jsonl` nor `test.jsonl` of
`--data` holds; writes `--out` with the greedy accuracy, the sampled reward at the training
temperature and the answer-format rate, each with its standard error. Any checkpoint a run kept (its
final one, a base, `checkpoints/step{N}/`) can be scored. Exits 2 when `eval.heldout` is not set.

    fp8rl eval heldout --config config/learn.yaml --data results/learn/data \\
        --checkpoint results/learn/runs/grpo/tiny/bf16/none/seed0/checkpoint --out /tmp/heldout.json
""",
        run=run,
        enabled=lambda cfg: cfg.eval.heldout is not None,
        data="train",
        sections=("numerics", "eval", "task", "schedule"),
        role="train",
        rule="eval_heldout",
        per_base=True,
    )
)
