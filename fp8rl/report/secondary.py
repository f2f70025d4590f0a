"""The secondary analysis of a pre-registered study on the held-out bf16 endpoint (`eval.heldout`).

The study's planned endpoint is the run's own sampled reward (`study.endpoint`), read from its rollout;
in an FP8 arm that rollout is the FP8 sampler, so "what FP8 did to learning" and "how noisy the FP8
sampler is" are mixed in it. The held-out endpoint scores every run's final checkpoint with the bf16
sampler on prompts no split holds (fp8rl.engine.heldout), which separates the two. This table re-reads
the study on it, labelled secondary: the planned endpoint and its decisions stay as registered.

Rows (`tables/secondary.csv`), per held-out metric (`ENDPOINTS`):

- `control`: the bf16 arm's gain over its own base (`heldout_gain_{metric}`, run minus base), with a 95 %
  t-interval over the unit of the study (base means with `study.unit: base`, else runs): did the control
  learn on the held-out endpoint?
- `planned` and `exploratory`: the study's contrasts computed exactly as the planned table computes them
  (fp8rl.report.planned.contrasts_table: Welch over runs, or paired t over bases), on the held-out value
  of each run instead of `study.endpoint`; the planned family's p is Holm-adjusted as registered, and
  the `decision` column says `secondary` (no decision is taken on it).

Failed and missing runs have no held-out value (never imputed); a diverged run is scored on its final
checkpoint like any other.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.report.planned import EXCLUDED, arm_endpoints, contrasts_table
from fp8rl.stats.intervals import t_interval
from fp8rl.vocabulary import REFERENCE_VARIANT

# (metric of eval/heldout.json, what it is)
ENDPOINTS = (
    ("sampled_reward", "mean reward of samples at the training temperature, bf16 sampler, held-out prompts"),
    ("greedy_acc", "greedy accuracy, bf16 sampler, held-out prompts"),
)
COLUMNS = [
    "endpoint", "family", "contrast", "arm", "reference", "unit", "n_arm", "n_reference", "difference",
    "low", "high", "p", "p_adjusted", "decision",
]  # fmt: skip
NOTES = [
    "Secondary analysis, not pre-registered: the study's contrasts on the held-out bf16 endpoint "
    "(every run's final checkpoint sampled with the bf16 sampler on held-out prompts; eval.heldout). "
    "The planned endpoint and its decisions stay as registered (tables/planned.md).",
    "`control`: the bf16 arm's gain over its own base on the held-out endpoint (run − base), mean over "
    "the study's unit with a 95% t-interval. `planned`/`exploratory`: the registered contrasts computed as "
    "in the planned table on the held-out value; `p_adjusted` is Holm over the planned family as "
    "registered; no decision is taken on a secondary analysis.",
]


def secondary_notes(multiplicity: str) -> list[str]:
    """`NOTES`, naming the study's adjustment when it is not Holm."""
    from fp8rl.report.planned import ADJUST_TEXT

    if multiplicity == "holm":
        return NOTES
    return [NOTES[0], NOTES[1].replace("Holm over the planned family", ADJUST_TEXT[multiplicity])]


def _control_row(endpoints: pd.DataFrame, cfg: ExperimentConfig, metric: str) -> dict:
    gain = f"heldout_gain_{metric}"
    bf16 = endpoints[(endpoints["variant"] == REFERENCE_VARIANT) & ~endpoints["status"].isin(EXCLUDED)]
    bf16 = bf16[np.isfinite(bf16[gain].to_numpy(dtype=float))] if gain in bf16 else bf16.iloc[0:0]
    units = bf16.groupby("base", sort=False)[gain].mean() if cfg.study.unit == "base" else bf16[gain]
    ci = t_interval(units.to_numpy(dtype=float))
    return {
        "endpoint": f"heldout/{metric}", "family": "control", "contrast": "bf16_gain_over_base",
        "arm": REFERENCE_VARIANT, "reference": "base", "unit": cfg.study.unit, "n_arm": ci.n, "n_reference": ci.n,
        "difference": ci.estimate, "low": ci.low, "high": ci.high, "p": math.nan, "p_adjusted": math.nan,
        "decision": "secondary",
    }  # fmt: skip


def secondary_table(endpoints: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """The secondary analysis (module docstring) from endpoints.csv's frame."""
    rows = []
    for metric, _ in ENDPOINTS:
        column = f"heldout/{metric}"
        rows.append(_control_row(endpoints, cfg, metric))
        per_run = arm_endpoints(endpoints, cfg, column)
        for planned in (True, False):
            t = contrasts_table(per_run, cfg.study, planned=planned)
            for r in t.to_dict("records"):
                rows.append(
                    {**{k: r.get(k, math.nan) for k in COLUMNS}, "endpoint": column, "unit": cfg.study.unit,
                     "family": "planned" if planned else "exploratory",
                     "p_adjusted": r["p_adjusted"] if planned else math.nan, "decision": "secondary"}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def secondary_view(table: pd.DataFrame, multiplicity: str = "holm") -> pd.DataFrame:
    """The markdown view: estimates with their intervals at three decimals, p at three."""
    from fp8rl.report.formats import cell_interval, cell_num
    from fp8rl.report.planned import ADJUST_LABEL

    view = table[["endpoint", "family", "contrast", "unit", "n_arm", "n_reference"]].copy()
    view["difference [95% CI]"] = [
        cell_interval(d, lo, hi)
        for d, lo, hi in zip(table["difference"], table["low"], table["high"], strict=True)
    ]
    view["p"] = table["p"].map(cell_num)
    view[f"p ({ADJUST_LABEL[multiplicity]})"] = table["p_adjusted"].map(cell_num)
    return view


NAMES = {
    "heldout/sampled_reward": "held-out sampled reward",
    "heldout/greedy_acc": "held-out greedy accuracy",
}


def secondary_lines(table: pd.DataFrame, multiplicity: str = "holm") -> list[str]:
    """Bullets of the table (its csv frame): per held-out metric the control's gain over its base and the
    study's contrasts with their intervals (the planned ones first, with their Holm p; then the exploratory
    ones, which a study may add later, as learn's bf16_floor contrasts were); no decision.
    `multiplicity`: the study's, which names the adjusted p."""
    from fp8rl.report.formats import interval, num
    from fp8rl.report.planned import ADJUST_LABEL

    label = ADJUST_LABEL[multiplicity]

    lines = []
    for endpoint, sub in table.groupby("endpoint", sort=False):
        name = NAMES.get(endpoint, endpoint)
        parts = []
        for r in sub.to_dict("records"):
            ci = interval(r["difference"], r["low"], r["high"], 3)
            if r["family"] == "control":
                units = "bases" if r["unit"] == "base" else "runs"
                lines.append(
                    f"- {name}, bf16 control's gain over its base: {ci} over {int(r['n_arm'])} {units}."
                )
            else:
                adjusted = f", p ({label}) {num(r['p_adjusted'], 3)}" if r["family"] == "planned" else ""
                parts.append(f"{r['arm']} − {r['reference']} {ci}{adjusted}")
        if parts:
            lines.append(
                f"- {name}, the study's contrasts (planned with their {label} p, then exploratory): "
                + "; ".join(parts)
                + "."
            )
    return lines
