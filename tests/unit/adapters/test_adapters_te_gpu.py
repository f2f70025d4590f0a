"""On an FP8 GPU: Transformer Engine's FP8 linear per recipe vs fp8rl's emulation of the same recipe.

The verl backend trains with TE's recipes (verl_fp8.MEGATRON_RECIPES); the smoke/cpu tiers emulate
them (fp8rl.fp8). On the same inputs and weights, TE's output and gradients must sit much closer to the
emulation than either sits to the unquantized fp32 result: they make the same quantization error.
Skipped without CUDA, Transformer Engine, or the compute capability the recipe needs.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

# fp8rl recipe -> (TE recipe class, kwargs, minimum compute capability)
TE_RECIPES = {
    "tensorwise": ("Float8CurrentScaling", {"fp8_format": "HYBRID"}, (8, 9)),
    "delayed": (
        "DelayedScaling",
        {"fp8_format": "HYBRID", "amax_history_len": 16, "amax_compute_algo": "max"},
        (8, 9),
    ),
    "blockwise": ("Float8BlockScaling", {}, (9, 0)),
    "mxfp8": ("MXFP8BlockScaling", {}, (10, 0)),
}


def _te_or_skip(granularity: str):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    te = pytest.importorskip("transformer_engine.pytorch", reason="needs transformer-engine[pytorch]")
    from transformer_engine.common import recipe as te_recipe

    cls_name, kwargs, cap = TE_RECIPES[granularity]
    if torch.cuda.get_device_capability() < cap:
        pytest.skip(f"{granularity} needs compute capability >= {cap}")
    if "fp8_format" in kwargs:
        kwargs = {**kwargs, "fp8_format": getattr(te_recipe.Format, kwargs["fp8_format"])}
    return te, getattr(te_recipe, cls_name)(**kwargs)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("granularity", list(TE_RECIPES))
def test_te_linear_matches_fp8rl_emulation(granularity):
    te, recipe = _te_or_skip(granularity)
    from fp8rl.fp8 import FP8Linear, get_recipe

    torch.manual_seed(0)
    n, k, m = 256, 512, 384
    x = torch.randn(n, k, device="cuda") * 2.0
    dy = torch.randn(n, m, device="cuda")
    ref = torch.nn.Linear(k, m, bias=False, device="cuda")
    te_lin = te.Linear(k, m, bias=False, params_dtype=torch.float32, device="cuda")
    with torch.no_grad():
        te_lin.weight.copy_(ref.weight)
    emu = FP8Linear.from_linear(
        torch.nn.Linear(k, m, bias=False, device="cuda"), get_recipe(granularity), backend="emulated"
    )
    with torch.no_grad():
        emu.weight.copy_(ref.weight)

    def run(module, fp8: bool):
        xi = x.clone().requires_grad_(True)
        if fp8:
            with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
                y = module(xi)
        else:
            y = module(xi)
        y.backward(dy)
        return y.detach(), xi.grad.detach()

    for _ in range(3 if granularity == "delayed" else 1):  # fill the amax histories with this input
        y_te, gx_te = run(te_lin, True)
        y_emu, gx_emu = run(emu, False)
    y_ref, gx_ref = run(ref, False)
    noise_y, noise_gx = _rel(y_emu, y_ref), _rel(gx_emu, gx_ref)
    assert noise_y > 1e-3  # FP8 really quantized something
    assert _rel(y_te, y_emu) < 0.5 * noise_y, (granularity, _rel(y_te, y_emu), noise_y)
    assert _rel(gx_te, gx_emu) < 0.5 * noise_gx, (granularity, _rel(gx_te, gx_emu), noise_gx)
