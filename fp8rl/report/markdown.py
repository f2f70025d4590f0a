"""Human-readable versions of the tables: formatted cells, notes, Markdown (and HTML) text.

The CSV files keep every number; these views round them and fold `mean`/`ci_low`/`ci_high` into one
cell, `0.515 [0.324, 0.706]`, with a blank interval and `(n=1)` when there is only one seed. Every
table formats a figure and its interval through `fmt_ci` (`figures`): the three numbers of a cell get
the same number of decimals, those that give the largest of them three significant digits
(`0.00110 [0.00040, 0.00210]`, `0.0196 [0.0156, 0.0240]`), or one shared power of ten below 0.001
(`1.26e-08 [0.05e-08, 3.09e-08]`).
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.comparison import DIAGNOSTICS, PAIRED, STEP_DELTAS, STEP_INTERVALS, USED_STATUSES
from fp8rl.report.methods import CI_METHOD, DELTA_METHOD, NO_CI_NOTE, RANGE_METHOD, SEED_MEAN_METHOD
from fp8rl.vocabulary import REFERENCE_VARIANT

COMPARISON_NOTES = [
    CI_METHOD + " (eval scores).",
    DELTA_METHOD + " (eval scores).",
    SEED_MEAN_METHOD + f" ({', '.join(c for c, _ in STEP_INTERVALS)}, and the paired section).",
    RANGE_METHOD + ".",
    NO_CI_NOTE + ".",
    f"Seeds with status {' or '.join(USED_STATUSES)} enter the means; failed and missing runs are counted only.",
    "Status counts are ok / diverged / failed / missing over the variant's seeds.",
    *(f"`{col}`: {desc}, mean over seeds." for col, desc in DIAGNOSTICS),
    "bf16 rows (granularity `none`) are the reference of every granularity group of their algo/model.",
    "`condition` (matrices with FP8 conditions only): the named FP8 setting of the group's fp8 runs; "
    "bf16 runs have condition `none` and are the reference of every condition.",
]
PAIRED_NOTES = [
    "Paired: each FP8 run re-scores a sample of its own tokens with quantization switched off (the BF16 "
    "shadow pass), so FP8 and BF16 clipping are compared on the same tokens of the same step.",
    *(f"`{col}`: {desc}; mean over steps, then over seeds." for col, desc in PAIRED),
    SEED_MEAN_METHOD + "; intervals cut to [0, 1] ([-1, 1] for excess clipping, a difference).",
    "Fractions are of the negative-advantage shadow tokens; `seeds` = runs that logged them.",
]

THROUGHPUT_NOTES = [
    "Means over the seeds whose run wrote throughput.json (runs_measured).",
    "`execution`: `emulated` = bf16/FP8 rounding emulated in fp32 software (no FP8 units); "
    "`hardware` = ran on bf16/FP8 hardware.",
    "`speedup_vs_bf16` = bf16 step time ÷ this step time (same algo/model).",
    "`calib_overhead_pct` = 100 × calib seconds ÷ (rollout + logprob + train seconds).",
]


SCIENTIFIC_BELOW = 1e-3  # cells whose largest number is smaller share a power of ten


def fmt(x: float, digits: int = 3) -> str:
    """A lone number (no interval): `digits` decimals, integers from 100, `digits` significant digits
    below 0.001. A figure with an interval goes through `fmt_ci`."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}" if x != 0 and abs(x) < 1e-3 else f"{x:.{digits}f}"


def _fixed(x: float, decimals: int, suffix: str = "") -> str:
    text = f"{x:.{decimals}f}"
    if float(text) == 0:  # no "-0.000"
        text = text.lstrip("-")
    return text + suffix


def figures(values: list[float], digits: int = 3) -> list[str]:
    """Format numbers that belong together (a figure and its bounds) alike: the same decimals, those that
    give the largest magnitude `digits` significant digits; below `SCIENTIFIC_BELOW` all share its power
    of ten (`1.26e-08`, `0.05e-08`). NaN gives "", ±inf "inf"/"-inf"."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=0.0)
    exponent = math.floor(math.log10(top)) if top > 0 else 0
    scale, suffix = 1.0, ""
    if 0 < top < SCIENTIFIC_BELOW:
        scale, suffix = 10.0**exponent, f"e{exponent:+03d}"
        decimals = digits - 1
    else:
        decimals = max(0, digits - 1 - exponent)
    out = []
    for v in values:
        if v is None or math.isnan(v):
            out.append("")
        elif math.isinf(v):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(_fixed(v / scale, decimals, suffix))
    return out


def fmt_ci(
    est: float, low: float, high: float, missing_ci: str, *, signed: bool = False, digits: int = 3
) -> str:
    """`est [low, high]` formatted alike (`figures`), or `est (missing_ci)` when the interval does not
    exist; `signed` puts a sign on the estimate (a difference)."""
    if est is None or math.isnan(est):
        return ""
    has_ci = not (math.isnan(low) or math.isnan(high))
    head, lo, hi = figures([est, low, high] if has_ci else [est, math.nan, math.nan], digits)
    if signed and not head.startswith("-"):
        head = "+" + head
    return f"{head} [{lo}, {hi}]" if has_ci else f"{head} ({missing_ci})"


def _group_cells(r: pd.Series) -> dict:
    """algo, model, granularity (and condition where the table has one), variant."""
    cells = {"algo": r["algo"], "model": r["model"], "granularity": r["granularity"]}
    if "condition" in r.index:
        cells["condition"] = r["condition"]
    return cells | {"variant": r["variant"]}


def ci_cell(r: pd.Series, col: str, *, delta: bool = False, signed: bool = False) -> str:
    """`fmt_ci` of a table's column with its interval (`col`, `col ci_low`, `col ci_high`), or, with
    `delta`, of its difference to bf16 (`col delta`, `col delta_ci_low`, `col delta_ci_high`; signed)."""
    if delta:
        return fmt_ci(
            r[f"{col} delta"], r[f"{col} delta_ci_low"], r[f"{col} delta_ci_high"], "no CI", signed=True
        )
    return fmt_ci(r[col], r[f"{col} ci_low"], r[f"{col} ci_high"], "no CI", signed=signed)


def comparison_view(table: pd.DataFrame, eval_keys: list[str]) -> pd.DataFrame:
    """The comparison table with formatted cells, one row per variant."""
    rows = []
    for _, r in table.iterrows():
        row = _group_cells(r) | {
            "ok/div/fail/miss": f"{r['ok']}/{r['diverged']}/{r['failed']}/{r['missing']}"
        }
        for key in eval_keys:
            n = int(r[f"{key} n"])
            row[key] = fmt_ci(r[f"{key} mean"], r[f"{key} ci_low"], r[f"{key} ci_high"], f"n={n}, no CI")
            row[f"Δ {key}"] = ci_cell(r, key, delta=True)
        intervals = {c for c, _ in STEP_INTERVALS}
        for col, *_ in DIAGNOSTICS:
            row[col] = ci_cell(r, col) if col in intervals else fmt(r[col], 4)
            if col in STEP_DELTAS:
                row[f"Δ {col}"] = ci_cell(r, col, delta=True)
        rows.append(row)
    return pd.DataFrame(rows)


def paired_view(table: pd.DataFrame) -> pd.DataFrame:
    """The paired section: FP8 rows only, phantom clipping vs the BF16 shadow with intervals."""
    rows = []
    for _, r in table[table["variant"] != REFERENCE_VARIANT].iterrows():
        row = _group_cells(r) | {col: ci_cell(r, col) for col, _ in PAIRED}
        row["seeds"] = int(r[f"{PAIRED[-1][0]} n"])
        rows.append(row)
    return pd.DataFrame(rows)


def numbers_view(table: pd.DataFrame) -> pd.DataFrame:
    """Any table with floats rounded for reading and NaN blank."""
    return table.apply(lambda col: col.map(fmt) if col.dtype.kind == "f" else col.fillna(""))


def to_markdown(title: str, view: pd.DataFrame, notes: list[str] = ()) -> str:
    parts = [f"# {title}", ""]
    if notes:
        parts += [f"- {n}" for n in notes] + [""]
    parts.append(view.to_markdown(index=False, disable_numparse=True) if not view.empty else "_no rows_")
    return "\n".join(parts) + "\n"


def comparison_markdown(
    title: str, view: pd.DataFrame, paired: pd.DataFrame | None = None, notes: list[str] = COMPARISON_NOTES
) -> str:
    """One section per (algo, model, granularity[, condition]) group under the shared `notes`, each with
    its paired FP8-vs-BF16-shadow table when `paired` (paired_view) has rows for it."""
    group = [c for c in ("algo", "model", "granularity", "condition") if c in view.columns]
    parts = [f"# {title}", "", *(f"- {n}" for n in notes)]
    if paired is not None and not paired.empty:
        parts += ["", "Paired sections:", *(f"- {n}" for n in PAIRED_NOTES)]
    parts.append("")
    for key, sub in view.groupby(group, sort=False):
        parts += [f"## {' / '.join(map(str, key))}", ""]
        parts += [sub.drop(columns=group).to_markdown(index=False, disable_numparse=True), ""]
        if paired is not None and not paired.empty:
            mine = paired[(paired[group] == pd.Series(key, index=group)).all(axis=1)]
            if not mine.empty:
                parts += ["Paired: FP8 vs its BF16 shadow (same tokens)", ""]
                parts += [mine.drop(columns=group).to_markdown(index=False, disable_numparse=True), ""]
    if view.empty:
        parts.append("_no rows_")
    return "\n".join(parts) + "\n"
