"""Formats and table access of the quoted result blocks (fp8rl.report.quotes): every figure a block
prints is formatted here, so a figure reads alike in every block.

Clip fractions in % and their differences in percentage points (pp), each with its 95 % interval as the
table gives it; **bold** marks an interval that excludes 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

SIGNIFICANCE_NOTE = "**bold**: the 95 % interval excludes 0."


class QuoteError(ValueError):
    """A block names no known generator, or its table is missing."""


BLOCKS: dict[str, Callable[[Path], str]] = {}  # NAME of `<!-- fp8rl:results NAME -->` -> its generator


def quoted_block(name: str) -> Callable[[Callable[[Path], str]], Callable[[Path], str]]:
    """Register the decorated function (published folder -> the block's markdown) as the generator of
    the quoted block `name`; a name registered twice is a ValueError naming both functions."""

    def register(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        if name in BLOCKS:
            raise ValueError(f"quoted block {name!r}: {fn.__qualname__} and {BLOCKS[name].__qualname__}")
        BLOCKS[name] = fn
        return fn

    return register


def num(x: float, digits: int = 2, sign: bool = False) -> str:
    """`x` to `digits` decimals (a true minus sign; `sign`: always signed); `n/a` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "−")


def pct(row: pd.Series, col: str) -> str:
    """`1.26 % [0.98, 1.54]` from the columns `col`, `col ci_low`, `col ci_high` (fractions)."""
    est = 100 * row[col]
    lo, hi = 100 * row.get(f"{col} ci_low", math.nan), 100 * row.get(f"{col} ci_high", math.nan)
    bracket = "" if math.isnan(lo) else f" [{num(lo)}, {num(hi)}]"
    return f"{num(est)} %{bracket}"


def pp(est: float, lo: float, hi: float) -> str:
    """`+0.70 pp [−0.05, +1.34]` from fractions; bold when the interval excludes 0."""
    if est is None or math.isnan(est):
        return "n/a"
    if math.isnan(lo):
        return f"{num(100 * est, sign=True)} pp (no interval)"
    text = f"{num(100 * est, sign=True)} pp [{num(100 * lo, sign=True)}, {num(100 * hi, sign=True)}]"
    return f"**{text}**" if excludes_zero(lo, hi) else text


def pp_point(est: float) -> str:
    """`+0.70 pp` from a fraction, without its interval."""
    return f"{num(100 * est, sign=True)} pp"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def published_table(published: Path, tier: str, name: str) -> pd.DataFrame:
    """`{published}/{tier}/tables/{name}.csv`; QuoteError when the tier has not published it."""
    path = published / tier / "tables" / f"{name}.csv"
    if not path.is_file():
        raise QuoteError(f"{path}: not published (run the tier and `fp8rl publish {tier}` first)")
    return pd.read_csv(path)


def optional_table(published: Path, tier: str, name: str) -> pd.DataFrame | None:
    """`{published}/{tier}/tables/{name}.csv`, or None when the tier has not published it."""
    path = published / tier / "tables" / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else None


def excludes_zero(lo: float, hi: float) -> bool:
    """Whether the interval [lo, hi] lies on one side of 0: False when either end is missing, and for a
    zero-width interval (seeds that all gave one value measure no spread, so they show nothing)."""
    return not (math.isnan(lo) or math.isnan(hi)) and lo < hi and (lo > 0 or hi < 0)


def interval(est: float, lo: float, hi: float, digits: int = 2) -> str:
    """`est [lo, hi]`, or `est` alone without an interval."""
    if math.isnan(lo):
        return num(est, digits)
    return f"{num(est, digits)} [{num(lo, digits)}, {num(hi, digits)}]"
