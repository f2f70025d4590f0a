"""Where a GRPO step's time goes: fp8rl's `bf16` variant and TRL's `GRPOTrainer`, under torch's profiler.

The job, the shapes and TRL's settings are `vs_trl.py`'s (its module doc). Per shape, each trainer runs
one warm-up step and `--steps` profiled steps, `--repeats` times interleaved (every figure is the median
over the repeats); the profiler's self CPU time of every op is summed into categories per step:

- `gemm`: the dense matrix products (`aten::mm`, `addmm`, `bmm`, `baddbmm`, `_scaled_mm`);
- `attn`: scaled-dot-product attention, forward and backward;
- `other`: every other op (normalisation, rotary embeddings, the bf16 rounding of GEMM operands, the
  KV cache, sampling, the optimizer, ...).

Also printed: `wall` (the profiled steps' wall time per step, which includes interpreter time outside
any op; the profiler adds overhead to every op, the many small ones of `other` most), `TRL/us` (TRL's
profiled wall over fp8rl's) and `TRL/dense`: TRL's profiled wall time over fp8rl's `gemm + attn`.
Both trainers run the same products on the same tokens (fp8rl's `bf16` GEMMs are fp32 GEMMs of
bf16-rounded operands on CPU), so `TRL/dense` bounds the speed-up over TRL of any implementation of
this job that does the same dense arithmetic at the same GEMM speed: `TRL/us` (vs_trl.py) cannot
exceed it by removing overhead alone.

Both trainers run in this one process, so in its numerics mode: run it with `FP8RL_NUMERICS=fast` to
profile TRL as its users run it (the machine's kernels; `--trl-bf16` for its bf16 mode) beside fp8rl's
fast mode; in the default `reproducible` mode TRL runs under fp8rl's pin (vs_trl.py's module doc).

    FP8RL_NUMERICS=fast .venv/bin/python benchmarks/step_profile.py [--steps 3] [--repeats 2] [--layers 2 4] [--hidden 128 256] ...
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import vs_trl

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
CATEGORIES = ("gemm", "attn", "other")
COLUMNS = ("wall", *CATEGORIES)  # per trainer, in the printed table


def category(op: str) -> str | None:
    """The category of a profiled op by name; None for non-aten entries (Python frames, autograd
    nodes), whose self time is already counted in the aten ops they run or is interpreter time."""
    if not op.startswith("aten::"):
        return None
    if op in GEMM_OPS:
        return "gemm"
    if "scaled_dot_product" in op or "flash_attention" in op:
        return "attn"
    return "other"


class StepWindow:
    """A torch profiler that records from the start of step `first` to the end of step `last` (not
    the checkpoint and summary a run writes after its last step)."""

    def __init__(self, first: int, last: int) -> None:
        import torch

        self.first, self.last = first, last
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.started = self.stopped = False
        self.t0 = self.t1 = 0.0

    def step_begins(self, step: int) -> None:
        if step == self.first and not self.started:
            self.prof.start()
            self.started, self.t0 = True, time.perf_counter()

    def step_ends(self, step: int) -> None:
        if step == self.last:
            self.stop()

    def stop(self) -> None:
        if self.started and not self.stopped:
            self.t1 = time.perf_counter()
            self.prof.stop()
            self.stopped = True

    def per_step(self, steps: int) -> dict[str, float]:
        """Seconds per profiled step: wall time and self CPU time per category."""
        out = dict.fromkeys(CATEGORIES, 0.0)
        for ev in self.prof.key_averages():
            cat = category(ev.key)
            if cat is not None:
                out[cat] += ev.self_cpu_time_total / 1e6
        out["wall"] = self.t1 - self.t0
        return {k: v / steps for k, v in out.items()}


def profile_fp8rl(cfg, data: Path, base: Path, model: str, out: Path, steps: int) -> dict[str, float]:
    from fp8rl.config.runs import RunSpec
    from fp8rl.engine.trainer import Trainer

    window = StepWindow(first=2, last=steps + 1)
    trainer = Trainer(
        cfg, RunSpec("grpo", model, "bf16", "none", 0), base_dir=base, data_dir=data, out_dir=out,
        progress=False, shadow_diagnostics=False,
    )  # fmt: skip
    train_step = trainer.train_step

    def profiled_step(step: int) -> dict:
        window.step_begins(step)
        metrics = train_step(step)
        window.step_ends(step)
        return metrics

    trainer.train_step = profiled_step
    summary = trainer.run()
    window.stop()  # in case the run ended early
    if summary["status"] == "failed":
        raise RuntimeError(f"fp8rl bf16: failed ({summary['reason']})")
    return window.per_step(steps)


def profile_trl(
    cfg, data: Path, base: Path, out: Path, shape, steps: int, bf16: bool = False
) -> dict[str, float]:
    from transformers import TrainerCallback

    window = StepWindow(first=2, last=steps + 1)

    class Window(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            window.step_begins(state.global_step + 1)

        def on_step_end(self, args, state, control, **kw):
            window.step_ends(state.global_step)  # already counts the step that just ended

        def on_train_end(self, args, state, control, **kw):
            window.stop()

    vs_trl.run_trl(cfg, data, base, out, shape, callbacks=[Window()], bf16=bf16)
    return window.per_step(steps)


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over repeated runs (the machine may be shared)."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


HEADER = (
    f"{'':<16} {'fp8rl bf16':-^31} {'TRL':-^31}\n"
    f"{'shape':<16} " + " ".join(f"{c:>7}" for c in COLUMNS * 2)
    + f" {'TRL/us':>7} {'TRL/dense':>9}"
)  # fmt: skip


def line(shape, ours: dict[str, float], theirs: dict[str, float]) -> str:
    """One shape's row: both breakdowns, TRL's profiled wall over ours and over our dense time."""
    cells = " ".join(f"{p[c]:7.3f}" for p in (ours, theirs) for c in COLUMNS)
    bound = theirs["wall"] / (ours["gemm"] + ours["attn"])
    return f"{str(shape):<16} {cells} {theirs['wall'] / ours['wall']:6.2f}x {bound:8.2f}x"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/smoke.yaml")
    p.add_argument("--steps", type=int, default=3, help="profiled steps after one warm-up step")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats per shape; medians kept")
    for key, values in vs_trl.GRID.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=int, nargs="+", default=list(values))
    p.add_argument("--trl-bf16", action="store_true", help="TRL in its bf16 mode (autocast), not fp32")
    a = p.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print("TRL is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    print(
        f"{vs_trl.PROMPTS} prompts x {vs_trl.GROUP} samples; seconds per step over {a.steps} profiled "
        f"steps, median of {a.repeats} interleaved repeats per figure"
    )
    print(HEADER)
    for s in itertools.product(a.layers, a.hidden, a.threads, a.new_tokens):
        shape = vs_trl.Shape(*s)
        cfg = vs_trl._cfg(a.config, a.steps, shape)
        runs: dict[str, list[dict[str, float]]] = {"fp8rl": [], "trl": []}
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            data, base, model = vs_trl.prepare(cfg, root)
            for rep in range(a.repeats):
                runs["fp8rl"].append(profile_fp8rl(cfg, data, base, model, root / f"fp8rl{rep}", a.steps))
                runs["trl"].append(
                    profile_trl(cfg, data, base, root / f"trl{rep}", shape, a.steps, a.trl_bf16)
                )
        print(line(shape, medians(runs["fp8rl"]), medians(runs["trl"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
