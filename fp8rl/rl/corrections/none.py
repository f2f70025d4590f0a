"""`none`: no correction (plain FP8, bf16, fp16, and the variants whose fix is elsewhere)."""

from __future__ import annotations

from fp8rl.rl.corrections._registry import (
    Correction,
    CorrectionInputs,
    CorrectionOptions,
    register_correction,
)


@register_correction("none")
def no_correction(inputs: CorrectionInputs, options: CorrectionOptions) -> Correction:
    return Correction(None, None, {})
