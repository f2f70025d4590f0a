"""What reproducible mode's GEMMs cost: the pinned OpenBLAS kernel (the pin) against MKL's COMPATIBLE
branch (the earlier pin, still set for the products ATen computes inside its own kernels), MKL's AVX2
branch and the CPU's own choice (AUTO, what `fast` mode's fp32 GEMMs run), side by side on this machine.

The libraries read their kernel choice once, when they load, so each path runs in a child process of
its own: per round, one child per path times every shape of the grid (fp32 `a @ b`, the GEMMs of the
benchmarked jobs: decode steps, training products of ~1-5k tokens), and the rounds interleave the paths
so that a noisy neighbour slows all of them alike; medians over rounds are kept. Printed per thread
count: GFLOP/s per path and the pin's time over each other path's (above 1: the pin is slower).
`AVX2,STRICT` is MKL's Intel-only branch (elsewhere MKL falls back to `AUTO`), the pin before
COMPATIBLE; COMPATIBLE is the one MKL branch AMD and Intel run alike (fp8rl.numerics).

    python benchmarks/gemm_paths.py [--threads 1 2] [--rounds 5] [--json results/benchmarks/gemm_paths.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# name -> (MKL_CBWR, whether torch's products run on the pinned OpenBLAS kernel); the first is the pin.
PIN = "pinned OpenBLAS"
PATHS = {
    PIN: ("COMPATIBLE,STRICT", True),
    "COMPATIBLE,STRICT": ("COMPATIBLE,STRICT", False),
    "AVX2,STRICT": ("AVX2,STRICT", False),
    "AUTO": ("AUTO", False),
}
SHAPES = (
    (16, 128, 384), (128, 128, 384), (512, 128, 512), (1792, 128, 344), (1792, 344, 128),
    (1792, 256, 688), (5120, 128, 344), (344, 5120, 128), (5120, 256, 688), (2048, 576, 1536),
)  # fmt: skip

CHILD = """
import json, os, statistics, sys, time
if sys.argv[3] == "pinned":
    import fp8rl
    fp8rl.numerics.pin_gemms()
import torch
threads, shapes = int(sys.argv[1]), json.loads(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
out = []
for m, k, n in shapes:
    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    reps = max(3, min(51, int(2e8 / (m * k * n))))
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
    out.append(2.0 * m * k * n / statistics.median(ts) / 1e9)
print(json.dumps(out))
"""


def one_round(path: str, threads: int) -> list[float]:
    """GFLOP/s per shape of SHAPES, in a child process whose GEMMs take `path`: the pinned OpenBLAS kernel
    under fp8rl's whole pin, or plain torch with MKL on one branch (ATen at AVX2, a fixed thread count)."""
    branch, pinned = PATHS[path]
    env = {k: v for k, v in os.environ.items() if k not in ("FP8RL_NUMERICS", "FP8RL_PINNED_BLAS")}
    env.update(MKL_CBWR=branch, ATEN_CPU_CAPABILITY="avx2", MKL_DYNAMIC="FALSE")
    cmd = [sys.executable, "-c", CHILD, str(threads), json.dumps(SHAPES), "pinned" if pinned else "mkl"]
    return json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)


def measure(threads: int, rounds: int) -> dict[str, list[float]]:
    """Median GFLOP/s per path and shape over `rounds` interleaved rounds."""
    runs: dict[str, list[list[float]]] = {name: [] for name in PATHS}
    for _ in range(rounds):
        for name in PATHS:
            runs[name].append(one_round(name, threads))
    return {name: [statistics.median(col) for col in zip(*r, strict=True)] for name, r in runs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per path; medians kept")
    p.add_argument("--json", type=Path, help="also write the record there (with provenance)")
    a = p.parse_args(argv)
    from fp8rl import numerics

    cpu = numerics.cpu()
    print(f"{cpu['model']}; CPU features: {' '.join(cpu['isa'])}; load average {os.getloadavg()[0]:.2f}")
    names = list(PATHS)
    grids = {}
    t0 = time.time()
    for threads in a.threads:
        g = grids[threads] = measure(threads, a.rounds)
        print(
            f"\n{threads} thread(s): GFLOP/s per GEMM path (MKL branches by MKL_CBWR), and the pin's time over each other path's"
        )
        print(
            f"{'M x K x N':<16}"
            + "".join(f"{n:>20}" for n in names)
            + "".join(f"{'pin/' + n:>22}" for n in names[1:])
        )
        for i, (m, k, n) in enumerate(SHAPES):
            row = "".join(f"{g[name][i]:20.1f}" for name in names)
            row += "".join(f"{g[name][i] / g[names[0]][i]:22.2f}" for name in names[1:])
            print(f"{f'{m}x{k}x{n}':<16}{row}", flush=True)
        for name in names[1:]:
            ratios = [g[name][i] / g[names[0]][i] for i in range(len(SHAPES))]
            print(f"pin's time over {name}'s: {min(ratios):.2f}-{max(ratios):.2f}x over {len(SHAPES)} shapes")
    if a.json:
        from fp8rl.io import atomic_write_json
        from fp8rl.provenance import provenance

        record = {
            "benchmark": "gemm_paths", "pin": PIN, "paths": {n: {"mkl_cbwr": b, "pinned_blas": pb} for n, (b, pb) in PATHS.items()},
            "shapes": SHAPES, "rounds": a.rounds, "gflops": {str(t): g for t, g in grids.items()},
            "seconds": round(time.time() - t0, 1), "load_average_end": list(os.getloadavg()), "provenance": provenance(),
        }  # fmt: skip
        atomic_write_json(a.json, record)
        print(f"record: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
