"""The formats every figure of a report page and of a quoted block is printed in (fp8rl.report's
SUMMARY.md and tables, fp8rl.quotes' blocks), so a figure reads alike everywhere: clip fractions in %
and their differences in percentage points (pp), each with its 95 % interval as the table gives it;
**bold** marks an interval that excludes 0; a true minus sign.
"""

from __future__ import annotations

import math

import pandas as pd

SIGNIFICANCE_NOTE = "**bold**: the 95 % interval excludes 0."


def num(x: float, digits: int = 2, sign: bool = False) -> str:
    """`x` to `digits` decimals (a true minus sign; `sign`: always signed); `n/a` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "−")


def g(x: float, digits: int = 2) -> str:
    """A small positive figure in its own scale (1.2e-3, 0.045, 12); `–` for a missing one."""
    if pd.isna(x):
        return "–"
    return f"{x:.{digits}g}".replace("e-0", "e-")


def p_text(p: float) -> str:
    """`< 0.001` or `= 0.042`: a p-value after `p`."""
    return "< 0.001" if p < 0.001 else f"= {num(p, 3)}"


def minutes(seconds: float) -> str:
    """`7 min 22 s`."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s"


def plural(n: int, word: str) -> str:
    """`1 shape`, `2 shapes`."""
    return f"{n} {word}{'s' if n != 1 else ''}"


def spread(values: list[float]) -> str:
    """A ratio over shapes as text: 'a×' for one value, 'lowest–highest×' for more."""
    return f"{num(values[0])}×" if len(values) == 1 else f"{num(min(values))}–{num(max(values))}×"


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


def ci(row: pd.Series | dict, col: str, delta: bool = False) -> tuple[float, float, float]:
    """(estimate, low, high) of a table's column `col` with its interval (`col ci_low`, `col ci_high`), or,
    with `delta`, of its difference to bf16 (`col delta`, `col delta_ci_low`, `col delta_ci_high`)."""
    keys = ("delta", "delta_ci_low", "delta_ci_high") if delta else ("", "ci_low", "ci_high")
    return tuple(row[f"{col} {k}".rstrip()] for k in keys)


def pp_point(est: float) -> str:
    """`+0.70 pp` from a fraction, without its interval."""
    return f"{num(100 * est, sign=True)} pp"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def excludes_zero(lo: float, hi: float) -> bool:
    """Whether the interval [lo, hi] lies on one side of 0: False when either end is missing, and for a
    zero-width interval (seeds that all gave one value measure no spread, so they show nothing)."""
    return not (math.isnan(lo) or math.isnan(hi)) and lo < hi and (lo > 0 or hi < 0)


def interval(est: float, lo: float, hi: float, digits: int = 2) -> str:
    """`est [lo, hi]`, or `est` alone without an interval."""
    if math.isnan(lo):
        return num(est, digits)
    return f"{num(est, digits)} [{num(lo, digits)}, {num(hi, digits)}]"


def cell_num(x: float, digits: int = 3) -> str:
    """A study table's figure: `digits` decimals, or `digits` significant digits below 1e-3; blank when
    missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return f"{x:.{digits}g}" if x != 0 and abs(x) < 1e-3 else f"{x:.{digits}f}"


def cell_interval(est: float, low: float, high: float) -> str:
    """A study table's `est [low, high]` in `cell_num`'s figures; `est` alone without an interval."""
    if not math.isfinite(est):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return cell_num(est)
    return f"{cell_num(est)} [{cell_num(low)}, {cell_num(high)}]"
