"""PPO-clip's ratio interval as one value: `ClipBounds(low, high)` is (L, U) in `clip(r, L, U)`.

Made once per run from the config (`ClipBounds.fixed(clip_low, clip_high)` = (1 - clip_low,
1 + clip_high)) or per update by calibrated clipping, and passed to `policy_loss` (the only form of
bounds it takes), the clip diagnostics and the phantom-clipping metrics, so no caller recomputes
`1 - clip_low`. It is a named `(low, high)` pair: it unpacks and compares like a tuple.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class _LowHigh(NamedTuple):
    low: float
    high: float


class ClipBounds(_LowHigh):
    """The lower and upper ratio bounds (L, U): finite, 0 <= L <= U. A named pair, so it compares and
    unpacks like a `(low, high)` tuple."""

    __slots__ = ()

    def __new__(cls, low: float, high: float) -> ClipBounds:
        low, high = float(low), float(high)
        if not (math.isfinite(low) and math.isfinite(high) and 0.0 <= low <= high):
            raise ValueError(f"clip bounds must satisfy 0 <= low <= high (finite), got ({low}, {high})")
        return super().__new__(cls, low, high)

    @classmethod
    def fixed(cls, clip_low: float, clip_high: float) -> ClipBounds:
        """PPO's fixed interval (1 - clip_low, 1 + clip_high)."""
        if not 0.0 < clip_low < 1.0:
            raise ValueError(f"clip_low must be in (0, 1), got {clip_low}")
        if not clip_high > 0.0:
            raise ValueError(f"clip_high must be > 0, got {clip_high}")
        return cls(1.0 - clip_low, 1.0 + clip_high)
