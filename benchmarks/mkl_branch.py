"""What the numerics pin costs in fp32 GEMMs: MKL's COMPATIBLE branch (the pin) against its AVX2 branch
and the CPU's own choice, side by side on this machine.

MKL reads `MKL_CBWR` once, when it loads, so each branch runs in a child process of its own: per round,
one child per branch times every shape of the grid (fp32 `a @ b`, the GEMMs of the benchmarked jobs:
decode steps, training products of ~1-5k tokens), and the rounds interleave the branches so that a
noisy neighbour slows all of them alike; medians over rounds are kept. Printed per thread count: GFLOP/s
per branch and the pin's slowdown against each other branch (their time over the pin's: above 1, the pin
is slower). `AVX2,STRICT` is what the pin was before; MKL runs it on Intel CPUs only (elsewhere it falls
back to `AUTO`, the CPU's own path), which is why the pin is COMPATIBLE now (fp8rl.numerics).

    python benchmarks/mkl_branch.py [--threads 1 2] [--rounds 5] [--json results/benchmarks/mkl_branch.json]
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

BRANCHES = {"pin (COMPATIBLE,STRICT)": "COMPATIBLE,STRICT", "AVX2,STRICT": "AVX2,STRICT", "AUTO": "AUTO"}
SHAPES = (
    (16, 128, 384), (128, 128, 384), (512, 128, 512), (1792, 128, 344), (1792, 344, 128),
    (1792, 256, 688), (5120, 128, 344), (344, 5120, 128), (5120, 256, 688), (2048, 576, 1536),
)  # fmt: skip

CHILD = """
import json, statistics, sys, time
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


def one_round(branch: str, threads: int) -> list[float]:
    """GFLOP/s per shape of SHAPES, in a child process whose MKL runs `branch` (the rest of the pin held:
    ATen at AVX2, a fixed thread count)."""
    env = {**os.environ, "MKL_CBWR": branch, "ATEN_CPU_CAPABILITY": "avx2", "MKL_DYNAMIC": "FALSE"}
    cmd = [sys.executable, "-c", CHILD, str(threads), json.dumps(SHAPES)]
    return json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)


def measure(threads: int, rounds: int) -> dict[str, list[float]]:
    """Median GFLOP/s per branch and shape over `rounds` interleaved rounds."""
    runs: dict[str, list[list[float]]] = {name: [] for name in BRANCHES}
    for _ in range(rounds):
        for name, branch in BRANCHES.items():
            runs[name].append(one_round(branch, threads))
    return {name: [statistics.median(col) for col in zip(*r, strict=True)] for name, r in runs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per branch; medians kept")
    p.add_argument("--json", type=Path, help="also write the record there (with provenance)")
    a = p.parse_args(argv)
    from fp8rl import numerics

    cpu = numerics.cpu()
    print(f"{cpu['model']}; CPU features: {' '.join(cpu['isa'])}; load average {os.getloadavg()[0]:.2f}")
    names = list(BRANCHES)
    grids = {}
    t0 = time.time()
    for threads in a.threads:
        g = grids[threads] = measure(threads, a.rounds)
        print(f"\n{threads} thread(s): GFLOP/s per MKL branch, and the pin's time over each other branch's")
        print(
            f"{'M x K x N':<16}"
            + "".join(f"{n:>24}" for n in names)
            + "".join(f"{'pin/' + n:>16}" for n in names[1:])
        )
        for i, (m, k, n) in enumerate(SHAPES):
            row = "".join(f"{g[name][i]:24.1f}" for name in names)
            row += "".join(f"{g[name][i] / g[names[0]][i]:16.2f}" for name in names[1:])
            print(f"{f'{m}x{k}x{n}':<16}{row}", flush=True)
        for name in names[1:]:
            ratios = [g[name][i] / g[names[0]][i] for i in range(len(SHAPES))]
            print(f"pin slower than {name} by {min(ratios):.2f}-{max(ratios):.2f}x over {len(SHAPES)} shapes")
    if a.json:
        from fp8rl.io import atomic_write_json
        from fp8rl.provenance import provenance

        record = {
            "benchmark": "mkl_branch", "branches": BRANCHES, "shapes": SHAPES, "rounds": a.rounds,
            "gflops": {str(t): g for t, g in grids.items()}, "seconds": round(time.time() - t0, 1),
            "load_average_end": list(os.getloadavg()), "provenance": provenance(),
        }  # fmt: skip
        atomic_write_json(a.json, record)
        print(f"record: {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
