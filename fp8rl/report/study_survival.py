"""Time to divergence per arm of a pre-registered study tier (the clipping tier; a study on a noise axis
also has the stability report beside it): the table `study_survival` and the figure `study_survival`.

A dose-axis tier has the stability report (fp8rl.report.stability) with a survival curve per variant and
dose; a study tier whose arms share one dose would otherwise show divergence only as a count in the arms
table. Built from the same per-run rows (`stability.run_stability`, from endpoints.csv: `diverged`,
`div_step` and `div_kind` from each run's summary.json `divergence`, `last_step` the last step it
records), each run assigned to the arm whose cell it belongs to (`planned.arm_runs`), with the study's
arm names as row labels; the divergence columns are computed as the stability table's
(`stability.diverged_fraction`, `divergence_steps`):

- `runs`: the arm's runs in the matrix; `trained`: those that trained (status ok or diverged; failed and
  missing runs are not in the curve);
- `diverged` of `trained` with an exact Clopper-Pearson 95 % interval of the fraction;
- `median_div_step`: the Kaplan-Meier median step of the first divergence (`stability.km_median`; runs
  that did not diverge are censored at their last step); blank while fewer than half the runs diverged;
  `div_step_min`/`div_step_max`: the range of the divergence steps;
- `kinds`: how the runs first diverged, with counts (fp8rl.rl.stability kinds);
- `censored`: runs that did not diverge, censored at `censored_at_min`..`censored_at_max` (their last
  steps: the planned steps for runs that finished);
- `peak_rel_entropy_median`, `peak_rel_entropy_max`: the median and the highest over the arm's runs of
  each run's entropy peak over its early baseline (the stability table's `peak_rel_entropy`: max entropy
  after the first `stability.baseline_steps` steps ÷ their median; the paper's failure is a surge,
  several times the baseline). Descriptive: no interval, no test.

A run that goes on after its first divergence (`stability.on_divergence: continue`) counts once, at that
first detection. The figure (fp8rl.report.stability_plots) draws the Kaplan-Meier curve of each arm.
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.config import ExperimentConfig, arm_cell
from fp8rl.report.load import RunSet
from fp8rl.report.methods import BINOMIAL_METHOD
from fp8rl.report.stability import diverged_fraction, divergence_steps

COLUMNS = [
    "arm", "cell", "runs", "trained", "diverged", "diverged_frac", "diverged_low", "diverged_high",
    "median_div_step", "div_step_min", "div_step_max", "kinds", "censored", "censored_at_min",
    "censored_at_max", "peak_rel_entropy_median", "peak_rel_entropy_max",
]  # fmt: skip
NOTES = [
    "Time to divergence per study arm (`study.arms`): a run diverges at its first detection (an entropy "
    "spike or collapse, gibberish, reward collapse, NaN/inf; summary.json `divergence`), and counts once "
    "even when it trained on after it.",
    f"`diverged/trained`: runs diverged of the arm's runs that trained (status ok or diverged), "
    f"`= fraction [low, high]`: {BINOMIAL_METHOD}. `runs`: the arm's runs in the matrix (failed and "
    "missing runs did not train and are not in the curve).",
    "`median step to divergence`: Kaplan-Meier median step of the first divergence (runs that did not "
    "diverge are censored at their last step); blank while fewer than half the runs diverged. "
    "`divergence steps`: their range.",
    "`kinds`: how the runs first diverged (fp8rl.rl.stability kinds), with counts. `censored at`: the "
    "last step of the runs that did not diverge (their number first).",
    "`entropy peak`: each run's highest entropy after its first stability.baseline_steps steps ÷ their "
    "median (so a run whose entropy only falls reads below 1); the median and the highest over the arm's "
    "runs (descriptive; a surge would be several times 1).",
]


def survival_table(runset: RunSet, per_arm: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """One row per arm of `cfg.study` (module docstring); `per_arm`: `run_stability`'s rows under their arm
    (planned.arm_runs)."""
    rows = []
    for arm, prefix in cfg.study.arms.items():
        g = per_arm[per_arm["arm"] == arm]
        censored = g.loc[~g["diverged"].astype(bool), "last_step"]
        peaks = g["peak_rel_entropy"].dropna()
        rows.append(
            {
                "arm": arm,
                "cell": prefix,
                "runs": int(sum(arm_cell(prefix, r) for r in runset.runs["run_id"])),
                "trained": len(g),
                **diverged_fraction(g),
                **divergence_steps(g),
                "censored": len(censored),
                "censored_at_min": float(censored.min()) if len(censored) else math.nan,
                "censored_at_max": float(censored.max()) if len(censored) else math.nan,
                "peak_rel_entropy_median": float(peaks.median()) if len(peaks) else math.nan,
                "peak_rel_entropy_max": float(peaks.max()) if len(peaks) else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def _steps(low: float, high: float) -> str:
    if math.isnan(low):
        return ""
    return f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}"


def survival_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table with the interval and the step ranges folded into cells, for Markdown and HTML."""
    from fp8rl.report.markdown import fmt, fmt_ci

    rows = []
    for _, r in table.iterrows():
        frac = fmt_ci(r["diverged_frac"], r["diverged_low"], r["diverged_high"], "no runs")
        censored = _steps(r["censored_at_min"], r["censored_at_max"])
        rows.append(
            {
                "arm": r["arm"],
                "cell": r["cell"],
                "runs": str(r["runs"]),
                "diverged/trained": f"{r['diverged']}/{r['trained']}" + (f" = {frac}" if frac else ""),
                "median step to divergence": fmt(r["median_div_step"], 0),
                "divergence steps": _steps(r["div_step_min"], r["div_step_max"]),
                "kinds": r["kinds"],
                "censored at": f"{r['censored']} at {censored}" if censored else "",
                "entropy peak (median, max)": _peaks(r["peak_rel_entropy_median"], r["peak_rel_entropy_max"]),
            }
        )
    cols = ["arm", "cell", "runs", "diverged/trained", "median step to divergence", "divergence steps"]
    return pd.DataFrame(rows, columns=[*cols, "kinds", "censored at", "entropy peak (median, max)"])


def _peaks(median: float, top: float) -> str:
    return "" if math.isnan(median) else f"{median:.2f}, {top:.2f}"
