"""`delayed`: one scale per tensor from an amax history (`amax_history_len`, `amax_compute_algo`:
Transformer Engine's `DelayedScaling`; torchao has none); the format as `tensorwise`."""

from __future__ import annotations

from fp8rl.fp8.recipe import Recipe, register_recipe, tensorwise_gemms


@register_recipe("delayed")
def delayed(fmt: str, delayed_kw: dict) -> Recipe:
    return Recipe("delayed", *tensorwise_gemms(fmt, True), **delayed_kw, te_recipe="DelayedScaling")
