"""Adjusted p-values of a family of tests: Holm's step-down and fixed-sequence testing.

scipy has neither. A study names its adjustment in its config (`study.adjust`); `ADJUSTMENTS` maps that
name to the function.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def holm(pvalues: Iterable[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(list(pvalues), dtype=float)
    out = np.full(p.shape, math.nan)
    idx = [i for i in np.argsort(p, kind="stable") if math.isfinite(p[i])]
    m, running = len(idx), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def fixed_sequence(pvalues: Iterable[float]) -> list[float]:
    """Fixed-sequence adjusted p-values, in the given order: the running maximum of the p-values, so a
    hypothesis is rejected at alpha exactly when it and every one before it have p < alpha (family-wise
    error at alpha, no split). A NaN (a contrast that could not be tested) ends the sequence: it and every
    later one stay NaN."""
    out, running = [], 0.0
    for p in pvalues:
        running = (
            math.nan if not math.isfinite(running) or not math.isfinite(p) else max(running, min(p, 1.0))
        )
        out.append(running)
    return out


ADJUSTMENTS = {"holm": holm, "fixed_sequence": fixed_sequence, "none": list}
