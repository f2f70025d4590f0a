"""The quoted blocks of the pre-registered study tiers and testbeds (fp8rl.quotes.files), from their
published tables, each a template bound to a tier:

- a study's findings: whether the bf16 control learned (`control.csv`), the pre-registered contrasts
  (`planned.csv`, `exploratory.csv`), the entropy peak per arm (`endpoints.csv`), divergence per variant
  and noise dose (`stability.csv`) or per arm (`study_survival.csv`), said as the tier's SUMMARY.md says
  them (fp8rl.report.findings), and for the clipping tier what calibration did to the clipping itself
  (`arms.csv`, `endpoints.csv`);
- a study's leaderboard with each arm's cost per step (`arms.csv`, `study_survival.csv`, `throughput.csv`),
  bound to the corrections' comparison, whose README and docs/longform.md quote it;
- a dose sweep's divergence table (`stability.csv`, `breaking_dose.csv`);
- the measurement re-read: where each FP8 setting sits in the field's units (`mismatch.csv`,
  fp8rl.report.mismatch_table) and the study on the held-out bf16 endpoint (`secondary.csv`,
  fp8rl.report.secondary);
- the longform testbed's bf16-only acceptance (`acceptance.csv`, fp8rl.report.acceptance) and its failure
  search per setting with its decision (`failure_search.csv`, fp8rl.report.failure_search).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.quotes.registry import QuoteError, arm_rows, optional_table, published_table, quoted_block
from fp8rl.report.control import never_ran
from fp8rl.report.findings import control_lines, planned_lines, stability_lines, survival_lines
from fp8rl.report.formats import g, interval, markdown_table, num, p_text, pp_point
from fp8rl.vocabulary import REAL_BF16_KL, VARIANT_SPECS

DIVERGENCE_VARIANTS = (
    "bf16",
    "fp8",
    "fp8_tis",
    "fp8_calib",
    "fp8_tis_calib",
)  # the divergence table's columns


def clipping_per_arm(published: Path, tier: str) -> str:
    """Each arm's negative-advantage clip fraction, its excess over the run's own BF16 shadow and, for
    calibrated arms, the bounds calibration set: seed means over all steps (`arms.csv`, `endpoints.csv`),
    descriptive."""
    arms = published_table(published, tier, "arms").to_dict("records")
    bounds = arm_rows(published_table(published, tier, "endpoints")).groupby("arm")[
        ["calib_low", "calib_high"]
    ]
    clip = ", ".join(f"{r['arm']} {num(100 * r['clip_low_neg'])} %" for r in arms)
    excess = ", ".join(f"{r['arm']} {pp_point(r['excess_clip'])}" for r in arms if pd.notna(r["excess_clip"]))
    calib = ", ".join(
        f"{arm} [{num(r['calib_low'])}, {num(r['calib_high'])}]"
        for arm, r in bounds.mean().iterrows()
        if pd.notna(r["calib_low"])
    )
    return (
        f"- Clipping (seed means over all steps, descriptive): `clip/low_neg` {clip}; its excess over each "
        f"run's own BF16 shadow {excess}; calibrated bounds (lower, upper) {calib}."
    )


@quoted_block("learn-findings", tier="learn")
@quoted_block("clipping-findings", tier="clipping", clipping=True)
@quoted_block(
    "corrections-findings",
    tier="corrections",
    endpoint="held-out sampled reward, bf16 sampler",
    adjusted="Holm",
    axis="target_kl",
)
@quoted_block(
    "longform-findings",
    tier="longform",
    endpoint="held-out sampled reward, bf16 sampler",
    adjusted="fixed sequence",
    axis="target_kl",
)
def study_findings(
    published: Path,
    tier: str,
    clipping: bool = False,
    endpoint: str = "final-window reward",
    adjusted: str = "Holm",
    axis: str = "noise_scale",
) -> str:
    """A few bullets for a pre-registered study tier: the control's reward rise with its interval and
    verdict, each planned contrast with its interval, adjusted p and decision (Welch t over seeds, or
    the paired t over bases of `study.unit: base`), as SUMMARY.md says them (fp8rl.report.findings), each
    exploratory contrast marked as such, with `clipping` what calibration did to the clipping
    (`clipping_per_arm`), the entropy peak after the baseline steps over the baseline per arm
    (`entropy_line`), and where runs diverged, of which kind (`stability.csv` along the noise `axis`, or
    `study_survival.csv`). `endpoint` and `adjusted` name the study's endpoint and multiplicity
    adjustment as its config registers them (a published table does not carry them)."""
    control = published_table(published, tier, "control")
    if control.empty:
        raise QuoteError(f"{published / tier}: control.csv has no bf16 group")
    void = not (control["verdict"] == "learned").all()
    planned = published_table(published, tier, "planned")
    paired = "bases" in planned  # study.unit: base (fp8rl.report.paired)
    test = "paired t over bases" if paired else "Welch t"
    lines = control_lines(control, void, who="bf16 control, ")
    lines += planned_lines(planned, void, never_ran(control), how=f" ({endpoint}, {test}, {adjusted})")
    exploratory = optional_table(published, tier, "exploratory")
    for r in [] if exploratory is None else exploratory.to_dict("records"):
        lines.append(
            f"- Exploratory, not a planned test: {r['arm']} − {r['reference']}: "
            f"{interval(r['difference'], r['low'], r['high'], 3)} ({'paired t' if paired else 'Welch'} "
            f"p {p_text(r['p'])}, unadjusted)."
        )
    lines += [clipping_per_arm(published, tier)] if clipping else []
    if (line := entropy_line(published, tier)) is not None:
        lines.append(line)
    if (stability := optional_table(published, tier, "stability")) is not None:
        lines += stability_lines(stability, axis)
    else:
        lines += survival_lines(published_table(published, tier, "study_survival"))
    return "\n".join(lines)


def entropy_line(published: Path, tier: str) -> str | None:
    """Each study arm's median run and the highest run of `peak_entropy_rel` (endpoints.csv: the highest
    entropy after the baseline steps ÷ the baseline's median; the baseline steps themselves are left out,
    so a falling entropy reads below 1); None when no run has one."""
    ends = arm_rows(published_table(published, tier, "endpoints")).dropna(subset=["peak_entropy_rel"])
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


@quoted_block("corrections-leaderboard", tier="corrections", reference="tis")
def leaderboard_quote(published: Path, tier: str, reference: str) -> str:
    """A study tier's arms ranked by the endpoint as its SUMMARY.md ranks them (`arms.csv`,
    `study_survival.csv`; fp8rl.report.study_endpoint.leaderboard), then each arm's cost per step in the
    study's order (`throughput.csv`, the mean over the arm's runs): seconds, the ratio to the `reference`
    arm's step and to the bf16 one, and the BF16 shadow's passes as a share of the other phases (the
    calibration's, and the diagnostic pass every FP8 arm runs on a sample of rows). Descriptive."""
    from fp8rl.report.study_endpoint import leaderboard

    arms = published_table(published, tier, "arms")
    cost = published_table(published, tier, "throughput").fillna({"condition": "none"})
    cost.index = [
        "/".join(map(str, k)) for k in cost[["algo", "model", "variant", "granularity", "condition"]].values
    ]
    missing = sorted(set(arms["cell"]) - set(cost.index))
    if missing:
        raise QuoteError(f"{published / tier}/tables/throughput.csv: no row for the arms' cells {missing}")
    step = dict(zip(arms["arm"], cost.loc[arms["cell"], "step_time_s"], strict=True))
    if reference not in step:
        raise QuoteError(f"{published / tier}/tables/arms.csv: no arm {reference!r} to compare the cost with")
    rows = [
        [f"`{r['arm']}`", num(step[r["arm"]], 2), f"{num(step[r['arm']] / step[reference], 2)}×",
         f"{num(1 / cost.loc[r['cell'], 'speedup_vs_bf16'], 2)}×", g(cost.loc[r["cell"], "calib_overhead_pct"])]
        for r in arms.to_dict("records")
    ]  # fmt: skip
    header = [
        "arm",
        "step (s)",
        f"step ÷ {reference}'s",
        "step ÷ bf16's",
        "BF16 shadow, % of the other phases",
    ]
    execution = " and ".join(sorted(set(cost.loc[arms["cell"], "execution"].dropna().astype(str))))
    return (
        leaderboard(arms, optional_table(published, tier, "study_survival"))
        + f"\n\nCost per step (`tables/throughput.md`; the mean over each arm's runs, execution: {execution}; "
        + "measured beside the tier's other runs). The shadow's share counts the calibration's passes and "
        + "the diagnostic pass every FP8 arm runs on a sample of rows, so what a correction costs is what "
        + f"its step adds over `{reference}`'s.\n\n"
        + markdown_table(header, rows)
    )


@quoted_block("learn-divergence", tier="learn")
def divergence_table(published: Path, tier: str) -> str:
    """Divergence counts with exact 95 % intervals and final accuracy per variant and dose, and the
    logistic breaking dose (ED50) per swept variant, from a dose-sweep tier's stability tables."""
    stab = published_table(published, tier, "stability")
    variants = [v for v in DIVERGENCE_VARIANTS if v in set(stab["variant"])]
    rows = []
    for dose in sorted(stab["noise"].unique()):
        cells = [num(dose, 0)]
        for v in variants:
            r = stab[(stab["variant"] == v) & (stab["noise"] == dose)]
            r = None if r.empty else r.iloc[0]
            cells.append(
                ""
                if r is None
                else f"{int(r['diverged'])}/{int(r['runs'])} [{num(r['diverged_low'])}, {num(r['diverged_high'])}]; "
                f"acc {interval(r['final_acc'], r['final_acc_low'], r['final_acc_high'])}"
            )
        rows.append(cells)
    method = "exact, Clopper–Pearson" if "fisher_p" in stab else "Wilson: the older method these tables carry"
    out = markdown_table(["dose", *variants], rows) + (
        f"\n\nEach cell: runs diverged / runs, with the 95 % interval of the rate ({method}); final accuracy "
        "(mean over the last steps) with its t-interval over seeds."
    )
    fisher = stab[stab["fisher_p"].notna()] if "fisher_p" in stab else stab.iloc[0:0]
    tests = "; ".join(
        f"{r['variant']} vs {r['vs']} at dose {num(r['noise'], 0)}: {int(r['diverged'])}/{int(r['runs'])} vs "
        f"{r['vs_diverged']}, p = {num(r['fisher_p'])}"
        for _, r in fisher.iterrows()
        if r["diverged"] > 0 or str(r["vs_diverged"]).split("/")[0] != "0"
    )
    out += f" Fisher's exact test, two-sided: {tests}." if tests else ""
    bd = optional_table(published, tier, "breaking_dose")
    if bd is not None and "ed50" in bd:  # tables published before the logistic fit have no ED50
        out += "\n\nDose at which half the runs break (logistic fit on log2 dose, profile-likelihood 95 % interval):\n\n"
        out += "\n".join(
            f"- {r['variant']}: diverged {r['diverged_by_dose']} at doses {r['doses']}; ED50 "
            f"{interval(r['ed50'], r['ed50_low'], r['ed50_high'], 1)} ({r['fit']})"
            for _, r in bd.iterrows()
        )
    return out


REAL_BF16 = f"a healthy real BF16 stack's {REAL_BF16_KL:g}"


def _setting(r: dict) -> str:
    target = "" if pd.isna(r["target_kl"]) else f", target KL {g(r['target_kl'])}"
    if not VARIANT_SPECS[r["variant"]].fp8:
        return r["variant"] + target  # a bf16_floor arm's target
    return f"{r['variant']} {r['granularity']} {r['format']}, noise {num(r['noise'], 2)}{target} ({r['condition']})"


# The mismatch block's columns: header -> the cell of one mismatch.csv row.
MISMATCH_COLUMNS = {
    "setting": _setting,
    "KL, median step (÷ real bf16)": lambda r: (
        f"{g(r['mismatch_kl_k3_median'])} ({g(r['mismatch_kl_k3_median'] / REAL_BF16_KL)}×)"
    ),
    "KL, mean": lambda r: g(r["mismatch_kl_k3"]),
    "\\|Δlogp\\|": lambda r: g(r["mismatch_abs_dlogp"]),
    "tmpe, median step": lambda r: g(r["mismatch_tmpe_median"], 4),
    "tmpe, mean": lambda r: g(r["mismatch_tmpe"], 3),
    "Δlogp": lambda r: g(r["mismatch_dlogp"]),
    "KL last ÷ first": lambda r: f"{r['mismatch_kl_k3_growth']:.2f}×",
    "KL vs BF16 shadow, median step": lambda r: g(r["shadow_mismatch_kl_k3_median"]),
    "\\|Δlogp\\| vs BF16 shadow": lambda r: g(r["shadow_mismatch_abs_dlogp"]),
}


@quoted_block("learn-mismatch", tier="learn")
@quoted_block("mechanism-mismatch", tier="mechanism", variants=("bf16", "fp16", "fp8"))
def mismatch_quote(published: Path, tier: str, variants: tuple[str, ...] | None = None) -> str:
    """A table of every setting of `tier`'s mismatch.csv (of `variants` only, when given: the mechanism
    tier's plain settings, bf16 and fp16 beside them) in the field's units, trainer vs rollout and FP8 vs
    its BF16 shadow, with the KL's growth over the run and its ratio to a real BF16 stack."""
    table = published_table(published, tier, "mismatch")
    if variants is not None:
        table = table[table["variant"].isin(variants)]
    rows = [[cell(r) for cell in MISMATCH_COLUMNS.values()] for r in table.to_dict("records")]
    note = (
        "\n\nTrainer vs rollout, per token, over each setting's runs (`tables/mismatch.csv`): the median "
        "step (a typical step) and the mean over steps, which a rare token with a large |Δlogp| can "
        f"dominate (k3 and tmpe average exp(±Δlogp)); the ratio in brackets is to {REAL_BF16}; the last two "
        "columns are the FP8 trainer against its own BF16 shadow on the same tokens."
    )
    return markdown_table(list(MISMATCH_COLUMNS), rows) + note


@quoted_block("learn-secondary", tier="learn")
def secondary_quote(published: Path, tier: str) -> str:
    """The secondary analysis of `tier`'s secondary.csv as bullets (fp8rl.report.secondary.secondary_lines)."""
    from fp8rl.report.secondary import secondary_lines

    return "\n".join(secondary_lines(published_table(published, tier, "secondary")))


@quoted_block("longform-acceptance", tier="longform")
def acceptance_quote(published: Path, tier: str) -> str:
    """Per bf16 run: step 1's entropy and response length, whether a detector flagged it, the held-out
    endpoint of its base and final checkpoint and the rise; then the mean rise over the bases with its
    interval, and the verdict of the report's notes."""
    table = published_table(published, tier, "acceptance")
    runs, mean = table.iloc[:-1], table.iloc[-1]
    rows = [
        [r["run_id"], num(r["entropy_step1"], 3), num(r["resp_len_step1"], 1),
         r["flagged"] if isinstance(r["flagged"], str) and r["flagged"] else "no",
         num(r["base_endpoint"], 3), num(r["final_endpoint"], 3), num(r["rise"], 3, sign=True)]
        for r in runs.to_dict("records")
    ]  # fmt: skip
    header = ["bf16 run", "entropy, step 1 (nats/token)", "response, step 1 (tokens)", "flagged",
              "held-out, base", "held-out, final", "rise"]  # fmt: skip
    notes = (published / tier / "tables" / "acceptance.md").read_text(encoding="utf-8")
    verdict = next((line for line in notes.splitlines() if "ccepted**" in line), None)
    if verdict is None:
        raise QuoteError(f"{tier}/tables/acceptance.md: no verdict line (**accepted** / **not accepted**)")
    verdict = verdict.removeprefix("- ")
    return (
        markdown_table(header, rows)
        + f"\n\nMean rise over the {runs['base'].nunique()} bases {interval(mean['rise'], mean['low'], mean['high'], 3)} "
        + f"(95 % t-interval; held-out sampled reward, the bf16 sampler). {verdict}"
    )


@quoted_block("longform-failure-search", tier="longform")
def failure_search_quote(published: Path, tier: str) -> str:
    """The failure search per setting, as the tier's SUMMARY.md gives it (failure_search.csv,
    fp8rl.report.failure_search): the decisive arm's divergences with their exact interval and kinds, its
    held-out contrast against the control, whether the setting fails and why; then the decision."""
    from fp8rl.report.failure_search import search_markdown

    complete, text = search_markdown(published_table(published, tier, "failure_search"))
    if not complete:
        raise QuoteError(f"{tier}: the published failure search is incomplete")
    return text
