"""Where the longform testbed's training step goes, and the most that faster kernels could save of it.

Each run of a config (default: the testbed's bf16 control and FP8 + TIS, at a fixed noise scale in a
copy of the config, so no target-KL search runs first) is built as `fp8rl train` builds it; it trains one warm-up step, then
`--steps` steps under torch's profiler. Each op's self CPU time is summed into categories per step:

- `gemm`: the matrix products (`aten::mm`, `addmm`, `bmm`, `baddbmm`; in `reproducible` mode each runs
  the pinned OpenBLAS kernel, fp8rl.pinned_blas, its torch <-> numpy views included);
- `attn`: scaled-dot-product attention, forward and backward;
- `draw`: the sampler's token draw (`multinomial` and its exponential variates, or the inverse-CDF
  draw's uniforms and search);
- `other`: every other op (the FP8 and bf16 emulation's rounding, normalisation, rotary embeddings, the
  KV cache, the optimizer, ...).

Printed per run: the step's wall time (profiled; the profiler adds overhead to every op, the many small
ones of `other` most), each category's seconds and share, and `bound`: the step's wall time over the
wall time left if the category took no time at all (Amdahl's bound on the speed-up any faster kernel for
it could give). Run it in the numerics mode to measure (default `reproducible`).

    .venv/bin/python benchmarks/testbed_profile.py --config config/longform.yaml \\
        --base results/longform/base/story/seed0 --data results/longform/data --steps 3 \\
        [--json results/published/benchmarks/testbed_profile_longform.json]
"""

from __future__ import annotations  # noqa: I001  (fp8rl before torch: the numerics pin)

import argparse
import os
import tempfile
import time
from pathlib import Path

import fp8rl  # noqa: F401  (applies the numerics mode before torch runs a kernel)
import torch
from torch.profiler import ProfilerActivity, profile

from calib_cadence import fixed_noise_config

RUNS = ("grpo/story/bf16/none/none/seed0", "grpo/story/fp8_tis/tensorwise/kl1e-1/seed0")
CATEGORIES = {
    "gemm": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attn": ("scaled_dot_product", "flash_attention"),
    "draw": ("aten::multinomial", "aten::exponential_", "aten::searchsorted", "aten::uniform_"),
}


def category(op: str) -> str:
    """The category of a profiler op name (module docstring): the first whose names match, else other."""
    for name, needles in CATEGORIES.items():
        if any(op == n or (not n.startswith("aten::") and n in op) for n in needles):
            return name
    return "other"


def profile_run(config: Path, run_id: str, args, out: Path) -> dict:
    """Seconds per profiled step: `wall`, and each category's self CPU seconds."""
    from fp8rl.config.runs import find_run
    from fp8rl.config_loader import load_config
    from fp8rl.engine.trainer import Trainer

    cfg = load_config(config, [f"schedule.steps={args.steps + 1}", *args.set])
    trainer = Trainer(cfg, find_run(cfg, run_id), base_dir=Path(args.base), data_dir=Path(args.data),
                      out_dir=out, progress=False)  # fmt: skip
    trainer.dir.write_config(cfg.model_dump(mode="json"))  # as Trainer.run does: the run folder exists
    trainer.train_step(1)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for step in range(2, args.steps + 2):
            trainer.train_step(step)
        wall = time.perf_counter() - t0
    seconds = dict.fromkeys([*CATEGORIES, "other"], 0.0)
    for event in prof.key_averages():
        seconds[category(event.key)] += event.self_cpu_time_total / 1e6
    per_step = {k: v / args.steps for k, v in seconds.items()}
    return {"wall_s": wall / args.steps, "self_s": per_step, "threads": torch.get_num_threads()}


def bounds(result: dict) -> dict:
    """Per category, and for `gemm+attn+draw`: the step's wall over the wall left without it."""
    wall, self_s = result["wall_s"], result["self_s"]
    parts = {**{k: self_s[k] for k in CATEGORIES}, "gemm+attn+draw": sum(self_s[k] for k in CATEGORIES)}
    return {k: wall / max(wall - v, 1e-9) for k, v in parts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/longform.yaml")
    ap.add_argument("--runs", nargs="+", default=list(RUNS))
    ap.add_argument("--base", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps after one warm-up step")
    ap.add_argument("--noise-scale", type=float, default=8.0, help="the conditions' fixed noise scale")
    ap.add_argument("--set", action="append", default=[], help="a config override for every run")
    ap.add_argument("--json", type=Path, help="write the record here (atomically)")
    args = ap.parse_args(argv)
    from fp8rl import numerics
    from fp8rl.io import atomic_write_json
    from fp8rl.provenance import provenance

    load_start, measured = os.getloadavg(), provenance()
    results = {}
    with tempfile.TemporaryDirectory(prefix="testbed_profile.") as tmp:
        config = fixed_noise_config(Path(args.config), args.noise_scale, Path(tmp) / "config.yaml")
        for i, run_id in enumerate(args.runs):
            result = profile_run(config, run_id, args, Path(tmp) / f"run{i}")
            result["bound"] = bounds(result)
            results[run_id] = result
            shares = ", ".join(f"{k} {v:.3f} s ({100 * v / result['wall_s']:.0f} %)"
                               for k, v in result["self_s"].items())  # fmt: skip
            print(f"{run_id}: wall {result['wall_s']:.3f} s/step; {shares}")
            print("  bound (wall / wall without it): "
                  + ", ".join(f"{k} {v:.2f}x" for k, v in result["bound"].items()), flush=True)  # fmt: skip
    if args.json:
        record = {"benchmark": "testbed_profile", "config": args.config, "noise_scale": args.noise_scale,
                  "steps": args.steps, "overrides": args.set, "numerics": numerics.active_mode(),
                  "runs": results, "load_average_start": load_start, "load_average_end": os.getloadavg(),
                  "provenance": measured}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, record, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
