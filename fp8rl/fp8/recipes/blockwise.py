"""`blockwise`: e4m3; activations and gradients in 1×128 tiles, weights in 128×128 tiles (DeepSeek-V3;
Transformer Engine's `Float8BlockScaling`, torchao's prototype `Float8BlockwiseLinear`)."""

from __future__ import annotations

from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe, register_recipe


@register_recipe("blockwise")
def blockwise(fmt: str, delayed_kw: dict) -> Recipe:
    act = OperandSpec("e4m3", "block1d", block=128)
    w = OperandSpec("e4m3", "block2d", block=128)
    return Recipe("blockwise", GemmSpec(act, w), GemmSpec(act, w), GemmSpec(act, act), **delayed_kw,
                  te_recipe="Float8BlockScaling",
                  torchao_recipe="prototype.blockwise_fp8_training Float8BlockwiseLinear")  # fmt: skip
