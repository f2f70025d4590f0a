"""`tensorwise`: one scale per tensor from its current amax (Transformer Engine's
`Float8CurrentScaling`, torchao's `tensorwise`); the format as given (hybrid: e4m3 x/W, e5m2 dy)."""

from __future__ import annotations

from fp8rl.fp8.recipe import Recipe, register_recipe, tensorwise_gemms


@register_recipe("tensorwise")
def tensorwise(fmt: str, delayed_kw: dict) -> Recipe:
    return Recipe("tensorwise", *tensorwise_gemms(fmt, False), **delayed_kw,
                  te_recipe="Float8CurrentScaling", torchao_recipe="tensorwise")  # fmt: skip
