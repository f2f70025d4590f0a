"""The figures of the pre-registered study tiers that README.md and docs/ quote (fp8rl.report.quotes),
from their published tables: whether the bf16 control learned (`control.csv`), the pre-registered
contrasts (`planned.csv`, `exploratory.csv`), divergence per variant and noise dose (`stability.csv`,
`breaking_dose.csv`: the learning tier) or per study arm (`study_survival.csv`: the clipping tier), and
for the clipping tier what calibration did to the clipping itself (`arms.csv`, `endpoints.csv`). The
control, the planned contrasts and the divergences are said as the tier's SUMMARY.md says them
(fp8rl.report.findings)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.report.control import never_ran
from fp8rl.report.findings import control_lines, planned_lines, stability_lines, survival_lines
from fp8rl.report.quote_format import (
    QuoteError,
    interval,
    markdown_table,
    num,
    optional_table,
    pp_point,
    published_table,
    quoted_block,
)

TIER = "learn"


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {num(p, 3)}"


@quoted_block("learn-findings")
def learn_findings(published: Path) -> str:
    return study_findings(published, TIER)


@quoted_block("clipping-findings")
def clipping_findings(published: Path) -> str:
    """The study's findings and, after the contrasts, what calibration did to the clipping itself."""
    return study_findings(published, "clipping", after_contrasts=[clipping_per_arm(published, "clipping")])


def clipping_per_arm(published: Path, tier: str) -> str:
    """Each arm's negative-advantage clip fraction, its excess over the run's own BF16 shadow and, for
    calibrated arms, the bounds calibration set: seed means over all steps (`arms.csv`, `endpoints.csv`),
    descriptive."""
    arms = published_table(published, tier, "arms")
    ends = published_table(published, tier, "endpoints")
    ends = ends[ends["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")
    bounds = ends.groupby("arm")[["calib_low", "calib_high"]].mean()
    clip = ", ".join(f"{r['arm']} {num(100 * r['clip_low_neg'])} %" for r in arms.to_dict("records"))
    excess = ", ".join(
        f"{r['arm']} {pp_point(r['excess_clip'])}"
        for r in arms.to_dict("records")
        if pd.notna(r["excess_clip"])
    )
    calib = ", ".join(
        f"{arm} [{num(r['calib_low'])}, {num(r['calib_high'])}]"
        for arm, r in bounds.iterrows()
        if pd.notna(r["calib_low"])
    )
    return (
        f"- Clipping (seed means over all steps, descriptive): `clip/low_neg` {clip}; its excess over each "
        f"run's own BF16 shadow {excess}; calibrated bounds (lower, upper) {calib}."
    )


def study_findings(published: Path, tier: str, after_contrasts: tuple[str, ...] | list[str] = ()) -> str:
    """A few bullets for a pre-registered study tier: the control's reward rise with its interval and
    verdict, each planned contrast with its interval, Holm p and decision (Welch t over seeds, or the
    paired t over bases of `study.unit: base`), as SUMMARY.md says them (fp8rl.report.findings), each
    exploratory contrast marked as such, the entropy peak after the baseline steps over the baseline per
    arm (`entropy_line`), and where runs diverged, of which kind (`stability.csv`, or
    `study_survival.csv` for a study). `after_contrasts`: a tier's own lines, placed
    after the contrasts."""
    control = published_table(published, tier, "control")
    if control.empty:
        raise QuoteError(f"{published / tier}: control.csv has no bf16 group")
    groups = control.to_dict("records")
    void = not (control["verdict"] == "learned").all()
    planned = published_table(published, tier, "planned")
    paired = "bases" in planned  # study.unit: base (fp8rl.report.paired)
    test = "paired t over bases" if paired else "Welch t"
    lines = control_lines(control, void, who="bf16 control, ")
    lines += planned_lines(planned, void, never_ran(groups), how=f" (final-window reward, {test}, Holm)")
    exploratory = optional_table(published, tier, "exploratory")
    for r in [] if exploratory is None else exploratory.to_dict("records"):
        lines.append(
            f"- Exploratory, not a planned test: {r['arm']} − {r['reference']}: "
            f"{interval(r['difference'], r['low'], r['high'], 3)} ({'paired t' if paired else 'Welch'} "
            f"p {_p(r['p'])}, unadjusted)."
        )
    lines += after_contrasts
    if (line := entropy_line(published, tier)) is not None:
        lines.append(line)
    if (stability := optional_table(published, tier, "stability")) is not None:
        lines += stability_lines(stability)
    else:
        lines += survival_lines(published_table(published, tier, "study_survival"))
    return "\n".join(lines)


def entropy_line(published: Path, tier: str) -> str | None:
    """Each study arm's median run and the highest run of `peak_entropy_rel` (endpoints.csv: the highest
    entropy after the baseline steps ÷ the baseline's median; the baseline steps themselves are left out,
    so a falling entropy reads below 1); None when no run has one."""
    ends = published_table(published, tier, "endpoints")
    ends = ends[ends["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")
    ends = ends.dropna(subset=["peak_entropy_rel"])
    if ends.empty:
        return None
    top = ends.loc[ends["peak_entropy_rel"].idxmax()]
    medians = ", ".join(
        f"{arm} {num(v)}" for arm, v in ends.groupby("arm", sort=False)["peak_entropy_rel"].median().items()
    )
    return (
        f"- Entropy after the baseline steps, over its baseline (a surge would be several times it): each "
        f"arm's median run {medians}; the highest run {num(top['peak_entropy_rel'])} ({top['arm']})."
    )


@quoted_block("learn-divergence")
def learn_divergence(published: Path) -> str:
    return divergence_table(published, "learn")


def divergence_table(published: Path, tier: str) -> str:
    """Divergence counts with exact 95 % intervals and final accuracy per variant and dose, and the
    logistic breaking dose (ED50) per swept variant, from a dose-sweep tier's stability tables."""
    stab = published_table(published, tier, "stability")
    variants = [
        v for v in ("bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib") if v in set(stab["variant"])
    ]
    doses = sorted(stab["noise"].unique())
    rows = []
    for dose in doses:
        cells = [num(dose, 0)]
        for v in variants:
            r = stab[(stab["variant"] == v) & (stab["noise"] == dose)]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            cells.append(
                f"{int(r['diverged'])}/{int(r['runs'])} [{num(r['diverged_low'])}, {num(r['diverged_high'])}]; "
                f"acc {interval(r['final_acc'], r['final_acc_low'], r['final_acc_high'])}"
            )
        rows.append(cells)
    out = markdown_table(["dose"] + variants, rows)
    method = "exact, Clopper–Pearson" if "fisher_p" in stab else "Wilson: the older method these tables carry"
    out += (
        f"\n\nEach cell: runs diverged / runs, with the 95 % interval of the rate ({method}); final accuracy "
        "(mean over the last steps) with its t-interval over seeds."
    )
    fisher = stab[stab["fisher_p"].notna()] if "fisher_p" in stab else stab.iloc[0:0]
    if not fisher.empty:
        tests = "; ".join(
            f"{r['variant']} vs {r['vs']} at dose {num(r['noise'], 0)}: {int(r['diverged'])}/{int(r['runs'])} vs "
            f"{r['vs_diverged']}, p = {num(r['fisher_p'])}"
            for _, r in fisher.iterrows()
            if r["diverged"] > 0 or str(r["vs_diverged"]).split("/")[0] != "0"
        )
        if tests:
            out += f" Fisher's exact test, two-sided: {tests}."
    bd = optional_table(published, tier, "breaking_dose")
    bd = pd.DataFrame() if bd is None else bd
    if "ed50" in bd:  # tables published before the logistic fit have no ED50
        lines = [
            f"- {r['variant']}: diverged {r['diverged_by_dose']} at doses {r['doses']}; ED50 "
            f"{interval(r['ed50'], r['ed50_low'], r['ed50_high'], 1)} ({r['fit']})"
            for _, r in bd.iterrows()
        ]
        out += "\n\nDose at which half the runs break (logistic fit on log2 dose, profile-likelihood 95 % interval):\n\n"
        out += "\n".join(lines)
    return out
