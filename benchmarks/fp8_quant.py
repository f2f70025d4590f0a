"""FP8 quantization and FP8-linear speed on this machine, as ratios measured side by side in one run.

1. fake-quant time ÷ a plain copy (`x.clone()`) of the same fp32 tensor, per granularity and size,
   eager and (with --compile) fused by `torch.compile`. Target on CPU: ≤ 3× a copy.
2. FP8-linear forward+backward ÷ the bf16-emulated linear's (fp8rl.fp8.BF16Linear) on the same
   `[n, n] x [n, n]` problem, per recipe. Target on CPU: ≤ 1.5×.
3. The CPU `torch._scaled_mm` path ÷ the emulated path for the tensorwise recipe (why CPU emulates).

Timings are the minimum CPU time (`time.process_time`) of interleaved repeats on `--threads` threads
(default 1): on a shared machine wall-clock ratios swing several-fold with other load, CPU-time minima
of a single-threaded process do not. Fresh-allocation costs (page faults) count on both sides: the copy
is `x.clone()`, a new tensor, as fake-quant returns one.

    .venv/bin/python benchmarks/fp8_quant.py                       # sizes 1024 2048 4096
    .venv/bin/python benchmarks/fp8_quant.py --sizes 1024 --compile --json out.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

from fp8rl.fp8 import TILE_GRANULARITIES, BF16Linear, FP8Linear, Tiling, get_recipe
from fp8rl.fp8.quantize import fake_quantize_tiled


def _time_pair(f: Callable[[], object], g: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Least CPU seconds of f and g over `repeats`, measured alternately after one warm-up call each."""
    f(), g()
    tf, tg = [], []
    for _ in range(repeats):
        for fn, acc in ((f, tf), (g, tg)):
            t0 = time.process_time()
            fn()
            acc.append(time.process_time() - t0)
    return min(tf), min(tg)


def bench_fake_quant(sizes: list[int], repeats: int, compiled: bool = False) -> list[dict]:
    rows = []
    for n in sizes:
        x = torch.randn(n, n)
        for g in TILE_GRANULARITIES:
            tiling = Tiling(g)
            fq = lambda t=tiling, x=x: fake_quantize_tiled(x, "e4m3", t, compiled=compiled)  # noqa: E731
            t_fq, t_copy = _time_pair(fq, x.clone, repeats)
            rows.append({"n": n, "granularity": g, "mode": "compiled" if compiled else "eager",
                         "fq_ms": 1e3 * t_fq, "copy_ms": 1e3 * t_copy, "ratio": t_fq / t_copy})  # fmt: skip
    return rows


def _fwd_bwd(layer: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        layer.weight.grad = None
        x.grad = None
        layer(x).backward(dy)

    return run


def bench_linear(sizes: list[int], repeats: int, recipes: list[str]) -> list[dict]:
    rows = []
    for n in sizes:
        torch.manual_seed(0)
        lin = nn.Linear(n, n, bias=False)
        x = torch.randn(n, n, requires_grad=True)
        dy = torch.randn(n, n)
        bf16 = _fwd_bwd(BF16Linear.from_linear(lin), x, dy)
        for name in recipes:
            fp8 = _fwd_bwd(FP8Linear.from_linear(lin, get_recipe(name), backend="emulated"), x, dy)
            t8, tb = _time_pair(fp8, bf16, repeats)
            rows.append(
                {"n": n, "recipe": name, "fp8_ms": 1e3 * t8, "bf16_emul_ms": 1e3 * tb, "ratio": t8 / tb}
            )
        emu = _fwd_bwd(FP8Linear.from_linear(lin, get_recipe("tensorwise"), backend="emulated"), x, dy)
        smm = _fwd_bwd(FP8Linear.from_linear(lin, get_recipe("tensorwise"), backend="scaled_mm"), x, dy)
        ts, te = _time_pair(smm, emu, repeats)
        rows.append({"n": n, "recipe": "tensorwise:scaled_mm÷emulated", "fp8_ms": 1e3 * ts,
                     "bf16_emul_ms": 1e3 * te, "ratio": ts / te})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--recipes", nargs="+", default=["tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"])
    p.add_argument("--skip-linear", action="store_true")
    p.add_argument("--compile", action="store_true", help="also time fake-quant fused by torch.compile")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device cpu, FP8 emulated, CPU-time minima"
    )
    rows = {"fake_quant": bench_fake_quant(args.sizes, args.repeats)}
    if args.compile:
        rows["fake_quant"] += bench_fake_quant(args.sizes, args.repeats, compiled=True)
    print("\nfake-quant ÷ copy (target ≤ 3x)")
    print(f"{'n':>6} {'granularity':<11} {'mode':<8} {'fq ms':>9} {'copy ms':>9} {'ratio':>7}")
    for r in rows["fake_quant"]:
        cells = f"{r['n']:>6} {r['granularity']:<11} {r['mode']:<8} {r['fq_ms']:>9.2f} {r['copy_ms']:>9.2f}"
        print(f"{cells} {r['ratio']:>6.2f}x")
    if not args.skip_linear:
        rows["linear"] = bench_linear(args.sizes, max(3, args.repeats // 2), args.recipes)
        print("\nFP8 linear fwd+bwd ÷ bf16-emulated linear (target ≤ 1.5x)")
        print(f"{'n':>6} {'recipe':<30} {'fp8 ms':>9} {'bf16 ms':>9} {'ratio':>7}")
        for r in rows["linear"]:
            print(
                f"{r['n']:>6} {r['recipe']:<30} {r['fp8_ms']:>9.1f} {r['bf16_emul_ms']:>9.1f} {r['ratio']:>6.2f}x"
            )
    if args.json:
        from fp8rl.io import atomic_write_json

        atomic_write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
