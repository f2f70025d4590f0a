"""The Megatron / Transformer Engine FP8 recipe of a verl run: `fp8_transformer_overrides` maps a run's
granularity and `fp8` section to the TransformerConfig fields verl passes to Megatron (`fp8`,
`fp8_recipe`, and the delayed recipe's amax history), and refuses a granularity or format Megatron has
no recipe for (`AdapterError` naming the key). A new granularity reaches the verl backend by an entry in
`MEGATRON_RECIPES`.
"""

from __future__ import annotations

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.config import FP8Config

# fp8rl granularity -> Megatron `fp8_recipe` (TransformerConfig); rowwise has none.
MEGATRON_RECIPES = {
    "tensorwise": "tensorwise",
    "delayed": "delayed",
    "blockwise": "blockwise",
    "mxfp8": "mxfp8",
}
# Megatron `fp8` format per fp8rl `fp8.format` (tensor-scaled recipes only; block recipes are e4m3).
MEGATRON_FORMATS = {"hybrid": "hybrid", "e4m3": "e4m3"}


def fp8_transformer_overrides(fp8: FP8Config, granularity: str) -> dict[str, str | int]:
    """Megatron TransformerConfig fields for FP8 GEMMs with the granularity's recipe, from a run's `fp8`
    section (`ResolvedRun.fp8`: the tier's, with the run's condition applied)."""
    if granularity not in MEGATRON_RECIPES:
        raise AdapterError(
            f"matrix.granularities: {granularity!r} has no Megatron/Transformer Engine recipe; "
            f"the verl backend runs {', '.join(MEGATRON_RECIPES)}",
            key=("matrix", "granularities"),
        )
    recipe = MEGATRON_RECIPES[granularity]
    if recipe in ("blockwise", "mxfp8"):
        fmt = "e4m3"  # block-scaled recipes are e4m3 in both directions (docs/architecture.md#names)
    elif fp8.format in MEGATRON_FORMATS:
        fmt = MEGATRON_FORMATS[fp8.format]
    else:
        raise AdapterError(
            f"fp8.format: {fp8.format!r} is not a Megatron FP8 format for the {granularity} recipe; "
            "use 'hybrid' or 'e4m3'",
            key=("fp8", "format"),
        )
    out: dict[str, str | int] = {"fp8": fmt, "fp8_recipe": recipe}
    if recipe == "delayed":
        out["fp8_amax_history_len"] = fp8.amax_history_len
        out["fp8_amax_compute_algo"] = fp8.amax_compute_algo
    return out
