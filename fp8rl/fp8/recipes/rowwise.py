"""`rowwise`: e4m3 everywhere, one scale per row of each GEMM's contraction dim, scales rounded down
to powers of two (torchao's `rowwise`; no Transformer Engine recipe)."""

from __future__ import annotations

from fp8rl.fp8.recipe import GemmSpec, OperandSpec, Recipe, register_recipe


@register_recipe("rowwise")
def rowwise(fmt: str, delayed_kw: dict) -> Recipe:
    op = OperandSpec("e4m3", "rowwise", pow2_scales=True)
    return Recipe("rowwise", GemmSpec(op, op), GemmSpec(op, op), GemmSpec(op, op), **delayed_kw,
                  torchao_recipe="rowwise")  # fmt: skip
