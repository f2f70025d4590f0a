"""`mxfp8`: e4m3 in 1×32 tiles with E8M0 power-of-two scales (OCP MX; Transformer Engine's
`MXFP8BlockScaling`, torchao's prototype mx_formats MXFP8)."""

from __future__ import annotations

from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe, register_recipe


@register_recipe("mxfp8")
def mxfp8(fmt: str, delayed_kw: dict) -> Recipe:
    op = OperandSpec("e4m3", "mx", block=32)
    return Recipe("mxfp8", GemmSpec(op, op), GemmSpec(op, op), GemmSpec(op, op), **delayed_kw,
                  te_recipe="MXFP8BlockScaling", torchao_recipe="prototype.mx_formats MXFP8")  # fmt: skip
