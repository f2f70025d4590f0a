"""FP8 on an FP8-capable GPU (Hopper/Ada/Blackwell): real FP8 GEMM speed, and TE vs fp8rl's emulation.

Needs CUDA with compute capability ≥ 8.9; exits 2 with a message otherwise. Three parts, one JSON:

1. GEMM speed at `--size`³ (default 8192): bf16 `torch.mm` ÷ FP8 `torch._scaled_mm` (e4m3, tensorwise
   and rowwise scales, fast accumulation). Target ≥ 1.6x.
2. Transformer Engine (if importable): `te.Linear` forward+backward under each FP8 recipe ÷ the same
   layer in bf16, at `--size`³. Recipes the GPU lacks (MXFP8 before Blackwell) are reported as skipped.
3. Agreement at `--check-size`: the same fp32 weights and inputs through TE's FP8 linear, through
   fp8rl's `FP8Linear` (emulated, and `scaled_mm` where exact), and through fp32. TE and the emulation
   agree within format error when `rel(TE, emu)` is at most half of `rel(emu, fp32)`: they round the
   same operands to the same grid, so what remains is accumulation order and output rounding.

    python benchmarks/fp8_gpu.py --json "$OUT/fp8_gpu.json"
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import torch

from fp8rl.fp8 import FP8Linear, get_recipe, quantize


def _cuda_time(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median milliseconds of `fn` measured with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def gemm_speed(n: int, repeats: int) -> dict:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t_bf16 = _cuda_time(lambda: torch.mm(a, b.t()), repeats)
    out = {"n": n, "bf16_ms": t_bf16, "tflops_bf16": 2 * n**3 / t_bf16 / 1e9}
    for gran in ("tensorwise", "rowwise"):
        qa, sa = quantize(a.float(), "e4m3", gran)
        qb, sb = quantize(b.float(), "e4m3", gran)
        inv_a = sa.reciprocal()
        inv_b = sb.reciprocal().reshape(1, -1) if sb.dim() else sb.reciprocal()

        def fp8_mm(qa=qa, qb=qb, inv_a=inv_a, inv_b=inv_b):
            return torch._scaled_mm(qa, qb.t(), scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)  # fmt: skip

        t = _cuda_time(fp8_mm, repeats)
        out[f"fp8_{gran}_ms"] = t
        out[f"speedup_{gran}"] = t_bf16 / t
    out["target"] = ">= 1.6x"
    return out


def _te_recipes(te_recipe) -> dict[str, Callable[[], object]]:
    fmt = te_recipe.Format
    return {
        "tensorwise": lambda: te_recipe.Float8CurrentScaling(fp8_format=fmt.HYBRID),
        "delayed": lambda: te_recipe.DelayedScaling(
            fp8_format=fmt.HYBRID, amax_history_len=16, amax_compute_algo="max"
        ),
        "blockwise": lambda: te_recipe.Float8BlockScaling(fp8_format=fmt.E4M3),
        "mxfp8": lambda: te_recipe.MXFP8BlockScaling(fp8_format=fmt.E4M3),
    }


def _autocast(te, recipe):
    if hasattr(te, "autocast"):  # TE >= 2.8
        return te.autocast(enabled=recipe is not None, recipe=recipe)
    return te.fp8_autocast(enabled=recipe is not None, fp8_recipe=recipe)


def te_speed(te, te_recipe, n: int, repeats: int) -> dict:
    layer = te.Linear(n, n, bias=False, params_dtype=torch.bfloat16, device="cuda")
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)

    def step(recipe):
        def run():
            with _autocast(te, recipe):
                y = layer(x)
            y.backward(dy)

        return run

    t_bf16 = _cuda_time(step(None), repeats)
    out = {"n": n, "bf16_fwd_bwd_ms": t_bf16}
    for name, make in _te_recipes(te_recipe).items():
        try:
            t = _cuda_time(step(make()), repeats)
            out[name] = {"fwd_bwd_ms": t, "speedup": t_bf16 / t}
        except Exception as exc:  # a recipe this GPU / TE build lacks
            out[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def agreement(te, te_recipe, n: int) -> dict:
    torch.manual_seed(0)
    ref_lin = torch.nn.Linear(n, n, bias=False, device="cuda")
    x = torch.randn(n, n, device="cuda")
    x[:, :8] *= 30.0  # a few outlier channels, as LLM activations
    ref = x @ ref_lin.weight.t()
    out = {"n": n}
    recipes = _te_recipes(te_recipe) if te is not None else {}
    for name in ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"):
        row: dict = {}
        for backend in ("emulated", "scaled_mm"):
            layer = FP8Linear.from_linear(ref_lin, get_recipe(name), backend=backend)
            with torch.no_grad():
                layer(x)  # delayed: seed the amax history with this input (a no-op otherwise)
                row[f"rel_{backend}_vs_fp32"] = _rel(layer(x), ref)
            if not layer.recipe.scaled_mm_exact:
                break
        emu = FP8Linear.from_linear(ref_lin, get_recipe(name), backend="emulated")
        with torch.no_grad():
            emu(x)
            y_emu = emu(x)
        if name in recipes:
            try:
                te_lin = te.Linear(n, n, bias=False, params_dtype=torch.float32, device="cuda")
                with torch.no_grad():
                    te_lin.weight.copy_(ref_lin.weight)
                    for _ in range(2):  # delayed: the second call scales by the first's amax, as ours
                        with _autocast(te, recipes[name]()):
                            y_te = te_lin(x)
                row["rel_te_vs_fp32"] = _rel(y_te, ref)
                row["rel_te_vs_emulated"] = _rel(y_te, y_emu)
                row["agree"] = row["rel_te_vs_emulated"] <= 0.5 * row["rel_emulated_vs_fp32"]
            except Exception as exc:
                row["te_skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--check-size", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "error: benchmarks/fp8_gpu.py needs a CUDA GPU with FP8 tensor cores; none is visible",
            file=sys.stderr,
        )
        return 2
    cap = torch.cuda.get_device_capability()
    if cap < (8, 9):
        print(f"error: GPU compute capability {cap} has no FP8 tensor cores (needs >= 8.9)", file=sys.stderr)
        return 2
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe as te_recipe
    except ImportError as exc:
        te = te_recipe = None
        te_missing = f"transformer_engine not importable: {exc}"
    result = {"device": torch.cuda.get_device_name(), "capability": list(cap), "torch": torch.__version__}
    result["gemm"] = gemm_speed(args.size, args.repeats)
    print(json.dumps({"gemm": result["gemm"]}, indent=1), flush=True)
    if te is not None:
        result["te_version"] = getattr(sys.modules.get("transformer_engine"), "__version__", "?")
        result["te_linear"] = te_speed(te, te_recipe, args.size, max(5, args.repeats // 2))
        print(json.dumps({"te_linear": result["te_linear"]}, indent=1), flush=True)
    else:
        result["te_linear"] = {"skipped": te_missing}
    result["agreement"] = agreement(te, te_recipe, args.check_size)
    print(json.dumps({"agreement": result["agreement"]}, indent=1), flush=True)
    if args.json:
        from fp8rl.io import atomic_write_json

        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
