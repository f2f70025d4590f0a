"""The quoted blocks of excess clipping (fp8rl.quotes.files): the smoke tier's comparison of each FP8
variant with bf16 (`comparison.csv`, `base_models.csv`, and the unpinned rerun against it) and the
mechanism tier's excess per format, granularity and noise dose (`mechanism.csv`).

A mechanism verdict over the granularities at one dose is a family of tests: a granularity's excess is
"shown" when its p, adjusted with Holm over the granularities of that condition (one dose, format and KV
cache) and variant, is below `ALPHA` (the mechanism table's `excess_clip p_holm`,
fp8rl.report.mechanism). Tables published before that column carry only the t-interval; there the p is
recovered from it (`p_from_interval`: the same one-sample t-test, as long as the interval was not cut to
[−1, 1], which an excess of a few pp never is) and adjusted here over the same family. A growth "×N per
doubling" divides by the excess at the lower dose, so it is printed only where that excess's interval
lies above 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fp8rl.quotes.registry import QuoteError, optional_table, published_table, quoted_block
from fp8rl.report.findings import void_line
from fp8rl.report.formats import SIGNIFICANCE_NOTE, ci, excludes_zero, markdown_table, num, pct, pp, pp_point
from fp8rl.stats.intervals import p_from_interval
from fp8rl.stats.multiplicity import holm
from fp8rl.vocabulary import REFERENCE_VARIANT

ALPHA = 0.05
WITHIN = 0.2  # "within 20 % of bf16": the relative difference the smoke verdict tests
FP8_VARIANTS = ("fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib")


def by_cell(comp: pd.DataFrame) -> dict[tuple[str, str], pd.Series]:
    """A comparison table's rows by (algo, variant)."""
    return {(r["algo"], r["variant"]): r for _, r in comp.iterrows()}


@quoted_block("smoke-clipping")
def smoke_clipping(published: Path) -> str:
    """Negative-advantage clipping per variant and algorithm, its Δ vs bf16, and the paired excess."""
    get = by_cell(published_table(published, "smoke", "comparison"))
    algos = [a for a in ("grpo", "dapo") if any(k[0] == a for k in get)]
    variants = [v for v in FP8_VARIANTS if any((a, v) in get for a in algos)]
    bf16 = {a: get[(a, REFERENCE_VARIANT)] for a in algos}
    rows = [["`clip/low_neg`, bf16", *(pct(bf16[a], "clip_low_neg") for a in algos)]]
    for v in variants:
        rows.append([f"{v}, Δ vs bf16", *(pp(*ci(get[(a, v)], "clip_low_neg", delta=True)) for a in algos)])
        rows.append(
            [
                f"{v} / bf16",
                *(num(get[(a, v)]["clip_low_neg"] / bf16[a]["clip_low_neg"]) + "×" for a in algos),
            ]
        )
    for v in variants:
        rows.append([f"paired excess clipping, {v}", *(pp(*ci(get[(a, v)], "excess_clip")) for a in algos)])
    return markdown_table(["", *(a.upper() for a in algos)], rows) + "\n\n" + SIGNIFICANCE_NOTE


@quoted_block("smoke-verdicts")
def smoke_verdicts(published: Path) -> str:
    """Per algorithm, the sentences the smoke tier's conclusions rest on, with their figures: does FP8
    clip more than bf16, does calibration bring it within 20 % of bf16, is its paired excess below
    plain FP8's."""
    verdicts = smoke_verdicts_from(published_table(published, "smoke", "comparison"))
    void = void_line(optional_table(published, "smoke", "control"))
    return verdicts if void is None else f"{void}\n{verdicts}"


def smoke_verdicts_from(comp: pd.DataFrame) -> str:
    """`smoke_verdicts` of one comparison table."""
    get, lines = by_cell(comp), []
    for algo in [a for a in ("grpo", "dapo") if (a, REFERENCE_VARIANT) in get]:
        bf16, fp8, calib = (
            get[(algo, REFERENCE_VARIANT)],
            get.get((algo, "fp8")),
            get.get((algo, "fp8_calib")),
        )
        parts = []
        if fp8 is not None:
            _, lo, hi = ci(fp8, "clip_low_neg", delta=True)
            sig = "the interval excludes 0" if excludes_zero(lo, hi) else "not significant at these seeds"
            parts.append(
                f"fp8 clips {num(fp8['clip_low_neg'] / bf16['clip_low_neg'])}× bf16's `clip/low_neg` ({sig})"
            )
        if calib is not None:
            parts.append(
                f"fp8_calib {num(calib['clip_low_neg'] / bf16['clip_low_neg'])}× ({within_20(calib, bf16)})"
            )
            if fp8 is not None:
                below = "below" if calib["excess_clip"] < fp8["excess_clip"] else "not below"
                parts.append(
                    f"fp8_calib's paired excess ({pp_point(calib['excess_clip'])}) is "
                    f"{below} plain fp8's ({pp_point(fp8['excess_clip'])})"
                )
        lines.append(f"- {algo.upper()}: " + "; ".join(parts) + ".")
    status = {k: int(comp[k].sum()) for k in ("ok", "diverged", "failed", "missing") if k in comp}
    evals = [c[: -len(" delta")] for c in comp.columns if c.endswith(" delta") and "/" in c]
    sig = sorted(
        {f"{r['variant']} {e} ({r['algo']})" for _, r in comp.iterrows() for e in evals
         if excludes_zero(*ci(r, e, delta=True)[1:])}
    )  # fmt: skip
    lines.append(
        "- Runs: " + ", ".join(f"{n} {k}" for k, n in status.items()) + "; eval scores whose Δ vs bf16 "
        "excludes 0: " + (", ".join(sig) if sig else "none") + "."
    )
    return "\n".join(lines)


def within_20(calib: pd.Series, bf16: pd.Series) -> str:
    """Whether fp8_calib's `clip/low_neg` is within 20 % of bf16's, said only as far as the interval of
    their difference (Δ vs bf16, Welch t), relative to bf16's mean, supports it: within when the whole
    interval lies inside ±20 %, more than 20 % away when it lies outside, undecided otherwise."""
    lo, hi = (calib[f"clip_low_neg {k}"] / bf16["clip_low_neg"] for k in ("delta_ci_low", "delta_ci_high"))
    within = f"{100 * WITHIN:.0f} %"
    if math.isnan(lo) or math.isnan(hi) or lo == hi:  # no width: seeds that all agree measure no spread
        return f"no interval to say whether within {within} of bf16"
    span = f"its Δ is {num(100 * lo, 0, sign=True)} % to {num(100 * hi, 0, sign=True)} % of bf16's"
    if lo >= -WITHIN and hi <= WITHIN:
        return f"within {within} of bf16: {span}"
    if lo > WITHIN or hi < -WITHIN:
        return f"more than {within} from bf16: {span}"
    return f"not shown within {within} of bf16: {span}"


@quoted_block("smoke-bases")
def smoke_bases(published: Path) -> str:
    """The spread of the per-seed base models the smoke runs start from."""
    bases = published_table(published, "smoke", "base_models")
    acc, loss = bases["acc/test_greedy"], bases["loss/final"]
    return (
        f"{len(bases)} base models (one per seed): greedy test accuracy {num(acc.min())}–{num(acc.max())}, "
        f"final SFT loss {num(loss.min(), 3)}–{num(loss.max(), 3)} (`tables/base_models.csv`)."
    )


@quoted_block("smoke-unpinned")
def smoke_unpinned(published: Path) -> str:
    """How far a run on another kernel path lands: the smoke tier rerun unpinned (`numerics: fast`,
    MKL's generic branch) against the published, pinned one, within the bands of `fp8rl check`, and
    the same verdicts computed on its own tables."""
    from fp8rl.publication.bands import check

    other = published / "smoke_unpinned"
    if not (other / "tables" / "comparison.csv").is_file():
        raise QuoteError(f"{other}/tables/comparison.csv: not published")
    lines, failures = check(str(other), str(published / "smoke"))
    checked = sum(1 for line in lines if line.startswith(("ok ", "OUT ")))
    outside = "; ".join(f.replace(" left its band:", ":") for f in failures) or "none"
    verdicts = smoke_verdicts_from(pd.read_csv(other / "tables" / "comparison.csv"))
    return "\n".join([
        f"- {checked - len(failures)} of {checked} per-cell metrics of the unpinned run lie inside the "
        f"published run's 95 % intervals (`fp8rl check`); outside: {outside}.",
        "- The same verdicts on the unpinned run's own tables:",
        *("  " + v for v in verdicts.splitlines()),
    ])  # fmt: skip


def _grpo_kv(published: Path) -> pd.DataFrame:
    """The mechanism table's GRPO rows with the FP8 KV cache on: the setting its verdicts are about."""
    mech = published_table(published, "mechanism", "mechanism")
    return mech[(mech["algo"] == "grpo") & (mech["kv_cache"].astype(bool))]


@quoted_block("mechanism-excess")
def mechanism_excess(published: Path) -> str:
    """Excess clipping per noise dose, format and variant (GRPO, tensorwise, FP8 KV cache on), with the
    share of plain FP8's excess that calibration removes."""
    sel = _grpo_kv(published)
    sel = sel[sel["granularity"] == "tensorwise"]
    formats = [f for f in ("hybrid", "e5m2", "e4m3") if f in set(sel["format"])]
    header = ["noise dose s"]
    for f in formats:
        header += [f"fp8, {f}", f"fp8_calib, {f}", f"removed by calib, {f}"]
    rows = []
    for s in sorted(sel["noise_scale"].unique()):
        cells = [num(s, 0)]
        for f in formats:
            at = sel[(sel["noise_scale"] == s) & (sel["format"] == f)].set_index("variant")
            cells += [
                pp(*ci(at.loc[v], "excess_clip")) if v in at.index else "n/a" for v in ("fp8", "fp8_calib")
            ]
            if {"fp8", "fp8_calib"} <= set(at.index) and at.loc["fp8", "excess_clip"] > 0:
                share = 1 - at.loc["fp8_calib", "excess_clip"] / at.loc["fp8", "excess_clip"]
                cells.append(
                    f"{num(100 * share, 0)} %"
                    if excludes_zero(*ci(at.loc["fp8"], "excess_clip")[1:])
                    else "–"
                )
            else:
                cells.append("n/a")
        rows.append(cells)
    bf16 = sel["bf16_clip_low_neg"].dropna()
    ref = f" bf16's own `clip/low_neg`: {num(100 * bf16.iloc[0])} %." if len(bf16) else ""
    share = (
        "`removed by calib`: 1 − fp8_calib / fp8, a ratio of point estimates, given only where fp8's excess "
        "is shown (bold); –: it is not."
    )
    return markdown_table(header, rows) + "\n\n" + SIGNIFICANCE_NOTE + ref + " " + share


@quoted_block("mechanism-verdicts")
def mechanism_verdicts(published: Path) -> str:
    """The mechanism tier's conclusions with their figures (GRPO, FP8 KV cache on): where plain FP8's
    excess clipping is shown at s = 1 (Holm over the granularities), how it grows per doubling of the
    dose where the lower dose's excess is shown, and, per dose, what share of it calibration removes
    where plain FP8's excess is shown, and where the calibrated excess itself still is."""
    sel = _grpo_kv(published)
    seeds = int(sel["seeds"].min())
    plain1 = sel[(sel["variant"] == "fp8") & (sel["noise_scale"] == 1) & (sel["format"] == "hybrid")]
    sig = shown(plain1)
    rest = sorted(set(plain1["granularity"]) - set(sig))
    family = f"after Holm over the {len(plain1)} granularities at this dose it is shown for"
    where = (
        f"{family} {', '.join(sig)}" + (f", not for {', '.join(rest)}" if rest else "")
        if sig
        else f"{family} none (not at {seeds} seeds)"
    )
    lines = [
        f"- Plain FP8 (s = 1, hybrid): excess clipping {pp_point(plain1['excess_clip'].min())} to "
        f"{pp_point(plain1['excess_clip'].max())} over the {len(plain1)} granularities; {where}."
    ]
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
        excess = calib.loc[both, "excess_clip"]
        lines.append(
            f"- Calibration at s = {num(dose, 0)} (hybrid): {removed}; the calibrated excess is "
            f"{pp_point(excess.min())} to {pp_point(excess.max())}, shown (Holm) for {', '.join(still) or 'none'}."
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
        if excludes_zero(*ci(lower, "excess_clip")[1:]) and lower["excess_clip"] > 0:
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
        adjusted = holm([p_from_interval(*ci(r, "excess_clip"), int(r["seeds"])) for _, r in rows.iterrows()])
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
