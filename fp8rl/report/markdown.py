"""Human-readable versions of the tables: formatted cells, notes, Markdown (and HTML) text.

The CSV files keep every number; these views round them and fold `mean`/`ci_low`/`ci_high` into one
cell, `0.515 [0.324, 0.706]`, with a blank interval and `(n=1)` when there is only one seed.
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.comparison import USED_STATUSES
from fp8rl.report.stats import CI_METHOD, DELTA_METHOD, NO_CI_NOTE
from fp8rl.report.summaries import DIAGNOSTICS

COMPARISON_NOTES = [
    CI_METHOD + ".",
    DELTA_METHOD + ".",
    NO_CI_NOTE + ".",
    f"Seeds with status {' or '.join(USED_STATUSES)} enter the means; failed and missing runs are counted only.",
    "Status counts are ok / diverged / failed / missing over the variant's seeds.",
    *(f"`{col}`: {desc}, mean over seeds." for col, _, _, desc in DIAGNOSTICS),
    "bf16 rows (granularity `none`) are the reference of every granularity group of their algo/model.",
]

THROUGHPUT_NOTES = [
    "Means over the seeds whose run wrote throughput.json (runs_measured).",
    "`execution`: `emulated` = bf16/FP8 rounding emulated in fp32 software (no FP8 units); "
    "`hardware` = ran on bf16/FP8 hardware.",
    "`speedup_vs_bf16` = bf16 step time ÷ this step time (same algo/model).",
    "`calib_overhead_pct` = 100 × calib seconds ÷ (rollout + logprob + train seconds).",
]


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}" if x != 0 and abs(x) < 1e-3 else f"{x:.{digits}f}"


def fmt_ci(est: float, low: float, high: float, missing_ci: str, *, signed: bool = False) -> str:
    """`est [low, high]`, or `est (missing_ci)` when the interval does not exist."""
    if est is None or math.isnan(est):
        return ""
    head = f"{est:+.3f}" if signed else fmt(est)
    if math.isnan(low) or math.isnan(high):
        return f"{head} ({missing_ci})"
    return f"{head} [{fmt(low)}, {fmt(high)}]"


def comparison_view(table: pd.DataFrame, eval_keys: list[str]) -> pd.DataFrame:
    """The comparison table with formatted cells, one row per variant."""
    rows = []
    for _, r in table.iterrows():
        row = {
            "algo": r["algo"],
            "model": r["model"],
            "granularity": r["granularity"],
            "variant": r["variant"],
            "ok/div/fail/miss": f"{r['ok']}/{r['diverged']}/{r['failed']}/{r['missing']}",
        }
        for key in eval_keys:
            n = int(r[f"{key} n"])
            row[key] = fmt_ci(r[f"{key} mean"], r[f"{key} ci_low"], r[f"{key} ci_high"], f"n={n}, no CI")
            row[f"Δ {key}"] = fmt_ci(
                r[f"{key} delta"], r[f"{key} delta_ci_low"], r[f"{key} delta_ci_high"], "no CI", signed=True
            )
        for col, *_ in DIAGNOSTICS:
            row[col] = fmt(r[col], 4)
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


def comparison_markdown(title: str, view: pd.DataFrame) -> str:
    """One section per (algo, model, granularity) group under the shared notes."""
    parts = [f"# {title}", "", *(f"- {n}" for n in COMPARISON_NOTES), ""]
    for (algo, model, gran), sub in view.groupby(["algo", "model", "granularity"], sort=False):
        parts += [f"## {algo} / {model} / {gran}", ""]
        parts += [
            sub.drop(columns=["algo", "model", "granularity"]).to_markdown(
                index=False, disable_numparse=True
            ),
            "",
        ]
    if view.empty:
        parts.append("_no rows_")
    return "\n".join(parts) + "\n"
