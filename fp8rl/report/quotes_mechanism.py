"""The mechanism tier's quoted blocks (fp8rl.report.quotes): excess clipping per dose and the verdicts.

A verdict over the granularities at one dose is a family of tests: a granularity's excess is "shown"
when its p, adjusted with Holm over the granularities of that condition (one dose, format and KV cache)
and variant, is below `ALPHA` (the mechanism table's `excess_clip p_holm`, fp8rl.report.mechanism).
Tables published before that column carry only the t-interval; there the p is recovered from it
(`p_from_interval`: the same one-sample t-test, as long as the interval was not cut to [−1, 1], which an
excess of a few pp never is) and adjusted here over the same family. A growth "×N per doubling" divides
by the excess at the lower dose, so it is printed only where that excess's interval lies above 0.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.report.findings import void_line
from fp8rl.report.quote_format import (
    SIGNIFICANCE_NOTE,
    excludes_zero,
    markdown_table,
    num,
    optional_table,
    pp,
    pp_point,
    published_table,
    quoted_block,
)
from fp8rl.report.stats import holm, p_from_interval

ALPHA = 0.05


@quoted_block("mechanism-excess")
def mechanism_excess(published: Path) -> str:
    """Excess clipping per noise dose, format and variant (GRPO, tensorwise, FP8 KV cache on), with the
    share of plain FP8's excess that calibration removes."""
    mech = published_table(published, "mechanism", "mechanism")
    sel = mech[
        (mech["algo"] == "grpo") & (mech["granularity"] == "tensorwise") & (mech["kv_cache"].astype(bool))
    ]
    formats = [f for f in ("hybrid", "e5m2", "e4m3") if f in set(sel["format"])]
    doses = sorted(sel["noise_scale"].unique())
    header = ["noise dose s"]
    for f in formats:
        header += [f"fp8, {f}", f"fp8_calib, {f}", f"removed by calib, {f}"]
    rows = []
    for s in doses:
        cells = [num(s, 0)]
        for f in formats:
            at = sel[(sel["noise_scale"] == s) & (sel["format"] == f)].set_index("variant")
            for v in ("fp8", "fp8_calib"):
                r = at.loc[v] if v in at.index else None
                cells.append(
                    "n/a"
                    if r is None
                    else pp(r["excess_clip"], r["excess_clip ci_low"], r["excess_clip ci_high"])
                )
            if {"fp8", "fp8_calib"} <= set(at.index) and at.loc["fp8", "excess_clip"] > 0:
                plain = at.loc["fp8"]
                is_shown = excludes_zero(plain["excess_clip ci_low"], plain["excess_clip ci_high"])
                share = 1 - at.loc["fp8_calib", "excess_clip"] / plain["excess_clip"]
                cells.append(f"{num(100 * share, 0)} %" if is_shown else "–")
            else:
                cells.append("n/a")
        rows.append(cells)
    bf16 = sel["bf16_clip_low_neg"].dropna()
    ref = f"bf16's own `clip/low_neg`: {num(100 * bf16.iloc[0])} %." if len(bf16) else ""
    share = (
        "`removed by calib`: 1 − fp8_calib / fp8, a ratio of point estimates, given only where fp8's excess "
        "is shown (bold); –: it is not."
    )
    return (
        markdown_table(header, rows) + "\n\n" + SIGNIFICANCE_NOTE + (" " + ref if ref else "") + " " + share
    )


@quoted_block("mechanism-verdicts")
def mechanism_verdicts(published: Path) -> str:
    """The mechanism tier's conclusions with their figures (GRPO, FP8 KV cache on): where plain FP8's
    excess clipping is shown at s = 1 (Holm over the granularities), how it grows per doubling of the
    dose where the lower dose's excess is shown, and, per dose, what share of it calibration removes
    where plain FP8's excess is shown, and where the calibrated excess itself still is."""
    mech = published_table(published, "mechanism", "mechanism")
    sel = mech[(mech["algo"] == "grpo") & (mech["kv_cache"].astype(bool))]
    seeds = int(sel["seeds"].min())
    lines = []
    plain1 = sel[(sel["variant"] == "fp8") & (sel["noise_scale"] == 1) & (sel["format"] == "hybrid")]
    sig = shown(plain1)
    rest = sorted(set(plain1["granularity"]) - set(sig))
    family = f"after Holm over the {len(plain1)} granularities at this dose it is shown for"
    where = (
        f"{family} {', '.join(sig)}" + (f", not for {', '.join(rest)}" if rest else "")
        if sig
        else f"{family} none (not at {seeds} seeds)"
    )
    lines.append(
        f"- Plain FP8 (s = 1, hybrid): excess clipping {pp_point(plain1['excess_clip'].min())} to "
        f"{pp_point(plain1['excess_clip'].max())} over the {len(plain1)} granularities; {where}."
    )
    for fmt in [f for f in ("hybrid", "e5m2") if f in set(sel["format"])]:
        fp8 = sel[(sel["variant"] == "fp8") & (sel["format"] == fmt) & (sel["granularity"] == "tensorwise")]
        lines.append(f"- Growth with the dose ({fmt}, tensorwise): {growth(fp8.sort_values('noise_scale'))}.")
    for dose in sorted(sel["noise_scale"].unique()):
        at = sel[(sel["noise_scale"] == dose) & (sel["format"] == "hybrid")]
        plain, calib = (at[at["variant"] == v].set_index("granularity") for v in ("fp8", "fp8_calib"))
        both = sorted(set(plain.index) & set(calib.index))
        if not both:
            continue
        sig = [g for g in shown(plain.reset_index()) if g in both]
        if sig:
            shares = [(1 - calib.loc[g, "excess_clip"] / plain.loc[g, "excess_clip"], g) for g in sig]
            removed = (
                f"plain FP8's excess is shown (Holm) in {len(sig)} of {len(both)} granularities, and "
                f"calibration {share_range(shares)} of it (ratios of point estimates"
                + ("; above 100 %: the calibrated excess is below 0)" if max(shares)[0] > 1 else ")")
            )
        else:
            removed = f"plain FP8's excess is shown (Holm) in none of {len(both)} granularities, so no share is computed"
        still = shown(calib.loc[both].reset_index())
        lines.append(
            f"- Calibration at s = {num(dose, 0)} (hybrid): {removed}; the calibrated excess is "
            f"{pp_point(calib.loc[both, 'excess_clip'].min())} to {pp_point(calib.loc[both, 'excess_clip'].max())}"
            + (f", shown (Holm) for {', '.join(still)}." if still else ", shown (Holm) for none.")
        )
    lines.append(
        f"- Shown: the excess differs from 0 by a one-sample t-test over the seeds, its p adjusted with Holm "
        f"over the granularities of one dose and variant, below {ALPHA:g}."
    )
    if (void := void_line(optional_table(published, "mechanism", "control"))) is not None:
        lines.insert(0, void)
    return "\n".join(lines)


def growth(by_dose: pd.DataFrame) -> str:
    """`×a to ×b per doubling (...)` from one series' rows in dose order: a ratio of consecutive doses'
    excess only where the lower dose's interval lies above 0 (dividing by an estimate that may be 0 says
    nothing), and which doses have none."""
    values = " → ".join(pp_point(v) for v in by_dose["excess_clip"])
    rows = by_dose.to_dict("records")
    steps, skipped = [], []
    for lower, upper in zip(rows, rows[1:], strict=False):
        if (
            excludes_zero(lower["excess_clip ci_low"], lower["excess_clip ci_high"])
            and lower["excess_clip"] > 0
        ):
            steps.append(upper["excess_clip"] / lower["excess_clip"])
        else:
            skipped.append(num(lower["noise_scale"], 0))
    gap = f"the excess at s = {', '.join(skipped)} has an interval including 0" if skipped else ""
    if not steps:
        return f"{values}; no ratio per doubling: {gap}"
    ratio = f"×{num(min(steps), 1)}" + (f" to ×{num(max(steps), 1)}" if len(steps) > 1 else "")
    return f"{ratio} per doubling ({values}" + (
        f"; none from s = {', '.join(skipped)}: {gap})" if gap else ")"
    )


def shown(rows: pd.DataFrame) -> list[str]:
    """The granularities of `rows` (one dose and variant: the family) whose excess is shown after Holm,
    sorted; from `excess_clip p_holm`, or, in tables published before it, from p recovered from the
    intervals and adjusted over `rows`."""
    if "excess_clip p_holm" in rows:
        adjusted = rows["excess_clip p_holm"].tolist()
    else:
        p = [
            p_from_interval(
                r["excess_clip"], r["excess_clip ci_low"], r["excess_clip ci_high"], int(r["seeds"])
            )
            for _, r in rows.iterrows()
        ]
        adjusted = holm(p)
    return sorted(g for g, p in zip(rows["granularity"], adjusted, strict=True) if p < ALPHA)


def share_range(shares: list[tuple[float, str]]) -> str:
    """'removes a % (g) to b % (h)', or, where calibration raised the excess somewhere, 'from adding
    a % (g) to removing b % (h)'."""
    (lo, g_lo), (hi, g_hi) = min(shares), max(shares)
    if len(shares) == 1:
        return f"{'removes' if lo >= 0 else 'adds'} {num(100 * abs(lo), 0)} % ({g_lo})"
    if lo >= 0:
        return f"removes {num(100 * lo, 0)} % ({g_lo}) to {num(100 * hi, 0)} % ({g_hi})"
    if hi < 0:
        return f"adds {num(-100 * hi, 0)} % ({g_hi}) to {num(-100 * lo, 0)} % ({g_lo})"
    return f"from adding {num(-100 * lo, 0)} % ({g_lo}) to removing {num(100 * hi, 0)} % ({g_hi})"
