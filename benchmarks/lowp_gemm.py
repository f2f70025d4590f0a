"""The grid behind fp8rl.fp8.fastgemm's dispatch rule: fp32 GEMMs against real bf16 GEMMs on this machine.

Per shape (M x K x N, the GEMMs of the benchmarked jobs: decode steps of 8-128 rows, training products of
~1-5k tokens, and the issue's reference shapes) and thread count: GFLOP/s of the fp32 GEMM the emulation
runs (MKL), of a bf16 GEMM on bf16 tensors (oneDNN), of the same with the casts the bf16 layers pay
(fp32 -> bf16 operands, bf16 -> fp32 output), and of the FP8 GEMM as `fast` mode runs it
(fp8rl.fp8.fastgemm.fp8_mm on prepared tensorwise operands, scales on the output). Every kernel is timed
`--repeats` times interleaved with the others, medians kept. The last column says what the rule of this
process (`fastgemm.rule()`) picks. A second table times one linear layer's forward and backward (its three
GEMMs with their casts or FP8 quantization) as the trainer runs it, on the training shapes of the
benchmarked job (tokens x in -> out): the bf16 variant's layer and the FP8 tensorwise and blockwise ones,
in ms, and the FP8 layers over the bf16 one (what the FP8 step's GEMM share costs beside the bf16 step's). Run it in the mode to measure: `FP8RL_NUMERICS=fast` (the machine's
kernels) or the default `reproducible` (the pinned path, where bf16 GEMMs run oneDNN's AVX2 code).

    FP8RL_NUMERICS=fast .venv/bin/python benchmarks/lowp_gemm.py [--threads 1 2] [--repeats 5]
"""

from __future__ import annotations  # noqa: I001  (fp8rl before torch: the numerics pin)

import argparse
import statistics
import sys
import time

import fp8rl  # noqa: F401  (applies the numerics mode before torch runs a kernel)
import torch

from fp8rl import numerics
from fp8rl.fp8 import fastgemm, get_recipe

SHAPES = (
    (8, 128, 128), (16, 128, 384), (64, 128, 128), (128, 128, 128), (128, 128, 384), (128, 256, 768),
    (512, 128, 512), (1792, 128, 344), (1792, 256, 688), (5120, 128, 344), (5120, 344, 128),
    (344, 5120, 128), (5120, 256, 688), (688, 5120, 256), (2048, 576, 1536),
)  # fmt: skip


def _time(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def measure(m: int, k: int, n: int, repeats: int) -> dict[str, float]:
    """GFLOP/s per kernel on one shape (module doc)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    ab, bb = a.bfloat16(), b.bfloat16()
    spec = get_recipe("tensorwise").output
    qa, qb = fastgemm.prepare(a, spec.a), fastgemm.prepare(b.t().contiguous(), spec.b)
    kernels = {
        "fp32": lambda: a @ b,
        "bf16": lambda: ab @ bb,
        "bf16+casts": lambda: (a.bfloat16() @ b.bfloat16()).float(),
        "fp8 (bf16)": lambda: fastgemm.fp8_mm(qa, qb, bf16_out=True),
    }
    reps = max(3, min(51, int(2e8 / (m * k * n))))
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(repeats):
        for name, fn in kernels.items():
            times[name].append(_time(fn, reps))
    flops = 2.0 * m * k * n
    return {name: flops / statistics.median(t) / 1e9 for name, t in times.items()}


LAYER_SHAPES = ((1792, 128, 344), (1792, 344, 128), (1792, 256, 688), (1792, 688, 256), (5120, 256, 688))


def layer_times(m: int, k: int, n: int, repeats: int) -> dict[str, float]:
    """ms per forward + backward of one converted linear (module doc), medians of interleaved repeats."""
    from torch import nn

    from fp8rl.fp8 import BF16Linear, FP8Linear

    torch.manual_seed(0)
    base = nn.Linear(k, n, bias=False)
    layers = {
        "bf16": BF16Linear.from_linear(base),
        "fp8 tensorwise": FP8Linear.from_linear(base, get_recipe("tensorwise")),
        "fp8 blockwise": FP8Linear.from_linear(base, get_recipe("blockwise")),
    }
    x, dy = torch.randn(m, k, requires_grad=True), torch.randn(m, n)

    def step(layer):
        layer(x).backward(dy)

    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(repeats):
        for name, layer in layers.items():
            times[name].append(_time(lambda layer=layer: step(layer), 5))
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per kernel; medians kept")
    a = p.parse_args(argv)
    rule = fastgemm.rule(torch.bfloat16)
    cpu = numerics.cpu()
    print(
        f"numerics {numerics.active_mode()}, ATen {torch.backends.cpu.get_cpu_capability()}, {cpu['model']}"
    )
    print(f"CPU features: {' '.join(cpu['isa'])}; rule: {rule.reason}")
    for threads in a.threads:
        torch.set_num_threads(threads)
        print(f"\n{threads} thread(s), GFLOP/s")
        print(f"{'M x K x N':<18} {'fp32':>7} {'bf16':>7} {'+casts':>7} {'fp8':>7}  rule")
        for m, k, n in SHAPES:
            g = measure(m, k, n, a.repeats)
            pick = "bf16" if rule.use_real(m, k, n) else "fp32"
            print(
                f"{f'{m}x{k}x{n}':<18} {g['fp32']:7.1f} {g['bf16']:7.1f} {g['bf16+casts']:7.1f} "
                f"{g['fp8 (bf16)']:7.1f}  {pick}",
                flush=True,
            )
        print(f"\n{threads} thread(s), one linear's forward + backward, ms")
        print(
            f"{'tokens x in -> out':<18} {'bf16':>7} {'fp8 tw':>7} {'fp8 blk':>7} {'tw/bf16':>8} {'blk/bf16':>8}"
        )
        for m, k, n in LAYER_SHAPES:
            t = layer_times(m, k, n, a.repeats)
            bf16, tw, blk = t["bf16"], t["fp8 tensorwise"], t["fp8 blockwise"]
            print(f"{f'{m}x{k}->{n}':<18} {bf16:7.2f} {tw:7.2f} {blk:7.2f} {tw / bf16:8.2f} {blk / bf16:8.2f}",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
