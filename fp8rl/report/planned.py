"""The planned contrasts of a pre-registered study tier (`study:` in the config, fp8rl.config.study).

Three tables, written only for a config with a `study` section (docs/attribution.md, "How to read"),
from the per-run endpoints (endpoints.csv, fp8rl.report.endpoints, whose `endpoint` column
`endpoints.study_endpoint` computes), each arm's runs picked by `arm_endpoints`:

- `arms`: per arm (a cell of the matrix without its seed): its runs, how many have an endpoint, how many
  diverged, the endpoint's mean over seeds with its 95 % t-interval and SD, and descriptive means that
  say what the arm changed (step-1 mismatch KL and entropy, `clip/low_neg`, paired excess clipping);
- `planned`: one row per planned contrast, `arm` minus `reference`: the difference of the per-seed
  endpoint means with its 95 % Welch t-interval, Welch's two-sided p, the p adjusted over the planned
  family (Holm, or none: `study.multiplicity`), the decision at `study.alpha`, and the power to detect
  the pre-registered `study.min_effect` at the seed counts used (with the SDs observed; and the planned
  power, with `study.planning_sd`);
- `exploratory`: the same numbers for the exploratory contrasts, unadjusted and with no decision: they
  were not planned as tests and are read as descriptions.

With `study.unit: base` the unit is the base model instead of the run: each arm's endpoints are
averaged within base first, the arms table's interval is over those base means, and a contrast is a
paired t-test over bases with its exact power (fp8rl.report.paired; the contrast tables gain `bases`
and `seeds_per_base`).

The endpoint of a run is the mean of `study.endpoint.metric` over its steps after `from_frac` of the
planned steps, or, for a held-out metric (`heldout/...`, `eval.heldout`), its final checkpoint's score
with the bf16 sampler. Runs that are `failed` or `missing` have none (counted, never imputed); a `diverged`
run keeps its endpoint (its collapse is what the endpoint measures), and one that stopped before the
window (a non-finite stop) scores 0: it earned no reward there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fp8rl.config import ContrastConfig, ExperimentConfig, StudyConfig, arm_cell
from fp8rl.report import paired
from fp8rl.report.formats import cell_interval, cell_num
from fp8rl.report.methods import value_range
from fp8rl.stats.intervals import finite, finite_mean, sample_sd, t_interval
from fp8rl.stats.multiplicity import ADJUSTMENTS
from fp8rl.stats.power import welch_power
from fp8rl.stats.welch import welch
from fp8rl.vocabulary import CLIP_LOW_NEG

# what `p_adjusted` is, per study.multiplicity (the planned table's notes)
ADJUST_TEXT = {
    "holm": "Holm over the planned family",
    "fixed_sequence": "fixed-sequence over the planned family in its listed order (the running maximum of "
    "the p-values: a contrast is tested at the full alpha only while every earlier one is rejected)",
    "none": "not adjusted",
}
# how a p adjusted per study.multiplicity is labelled in a table or a line
ADJUST_LABEL = {"holm": "Holm", "fixed_sequence": "fixed sequence", "none": "unadjusted"}

STUDY_TABLES = ("arms", "planned", "exploratory")
EXCLUDED = ("failed", "missing")

# the arms table's descriptive seed means: endpoints.csv's per-run values (fp8rl.report.endpoints)
DESCRIPTIVE = ("mismatch_kl_step1", "entropy_step1", "clip_low_neg", "excess_clip")
ARM_COLUMNS = ["arm", "cell", "runs", "n", "diverged", "endpoint", "low", "high", "sd", *DESCRIPTIVE]
CONTRAST_COLUMNS = [
    "contrast", "arm", "reference", "n_arm", "n_reference", "difference", "low", "high", "df", "p",
    "p_adjusted", "decision", "power_observed", "power_planned", "question",
]  # fmt: skip


def contrast_columns(study: StudyConfig) -> list[str]:
    """The contrast tables' columns: `CONTRAST_COLUMNS`, with `paired.BASE_COLUMNS` for `unit: base`."""
    if study.unit == "run":
        return CONTRAST_COLUMNS
    at = CONTRAST_COLUMNS.index("n_reference") + 1
    return [*CONTRAST_COLUMNS[:at], *paired.BASE_COLUMNS, *CONTRAST_COLUMNS[at:]]


def _notes(study: StudyConfig) -> tuple[list[str], list[str], list[str]]:
    e = study.endpoint
    endpoint = (
        f"Endpoint (pre-registered): per run, the mean of `{e.metric}` over the steps after {e.from_frac:g} "
        "of the planned steps; failed and missing runs have none (not imputed), a diverged run keeps its "
        "own, one that stopped before the window scores 0."
    )
    if e.metric.startswith("heldout/"):
        endpoint = (
            f"Endpoint (pre-registered): per run, `{e.metric}` of its final checkpoint sampled with the bf16 "
            "sampler on held-out prompts (eval.heldout); failed and missing runs have none (not imputed), a "
            "diverged run is scored on its final checkpoint."
        )
    arms = [
        endpoint,
        "`endpoint` [low, high]: mean over the arm's seeds with a 95% Student t-interval; `sd`: SD of the "
        "seed endpoints; `n`: runs with an endpoint of `runs`.",
        "Descriptive seed means (no test): `mismatch_kl_step1` (mismatch/kl_k3 at step 1), `entropy_step1`, "
        "`clip_low_neg` and `excess_clip` (phantom/low_neg − phantom/missed_neg, paired against the run's own "
        "BF16 shadow; FP8 arms only) over all steps.",
    ]
    if study.unit == "base":
        arms[1] = (
            "`endpoint` [low, high]: each base's mean over its seeds, then the mean over bases with a 95% "
            "Student t-interval (study.unit: base); `sd`: SD of the base means; `bases`: bases with an "
            "endpoint; `n`: runs with an endpoint of `runs`."
        )
    adjust = ADJUST_TEXT[study.multiplicity]
    if study.unit == "base":
        return arms, paired.planned_notes(study, endpoint, adjust), _exploratory_notes(endpoint)
    planned = [
        endpoint,
        f"`difference` = mean endpoint of `arm` − that of `reference` (per-seed endpoints, unpaired), "
        f"95% Welch t-interval [low, high]; `p`: Welch's t-test, {study.sides}; `p_adjusted`: {adjust}; "
        f"`decision` at alpha {study.alpha:g}.",
        f"`power_observed`: the power of this test to detect a difference of ±{study.min_effect:g} "
        "(study.min_effect) at the seed counts used, with the SDs observed (the Welch test simulated on normal seeds, 20000 draws, seeded); "
        f"`power_planned`: the same with the SD assumed before the runs (study.planning_sd = "
        f"{study.planning_sd:g}). With Holm both use alpha / (number of planned contrasts), a lower bound.",
    ]
    return arms, planned, _exploratory_notes(endpoint)


def _exploratory_notes(endpoint: str) -> list[str]:
    return [
        endpoint,
        "Exploratory: not part of the pre-registered tests. Same estimates as the planned table, p "
        "unadjusted and no decision: read them as descriptions that suggest the next planned study.",
    ]


# ------------------------------------------------------------------------------------------- contrasts


def contrast_row(
    c: ContrastConfig, arm: Sequence[float], reference: Sequence[float], study: StudyConfig, alpha: float
) -> dict:
    """The estimate, interval, test and power of one contrast (`alpha`: the level the power uses)."""
    a, b = finite(arm), finite(reference)
    w = welch(a, b)
    sd_a, sd_b = sample_sd(a), sample_sd(b)
    return {
        "contrast": c.name,
        "arm": c.arm,
        "reference": c.reference,
        "n_arm": int(a.size),
        "n_reference": int(b.size),
        "difference": w.delta.estimate,
        "low": w.delta.low,
        "high": w.delta.high,
        "df": w.df,
        "p": w.p,
        "power_observed": welch_power(study.min_effect, sd_a, a.size, sd_b, b.size, alpha),
        "power_planned": welch_power(
            study.min_effect, study.planning_sd, a.size, study.planning_sd, b.size, alpha
        ),
        "question": c.question,
    }


# --------------------------------------------------------------------------------------------- tables


def arm_runs(per_run: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """`per_run` (any frame with a `run_id` column) with each arm's runs under its name in `arm`, in the
    order of `study.arms` (a run in two arms has a row in each; a run of no arm is left out)."""
    parts = [per_run[per_run["run_id"].map(lambda r, p=p: arm_cell(p, r))].assign(arm=arm)
             for arm, p in cfg.study.arms.items()]  # fmt: skip
    return pd.concat(parts, ignore_index=True) if parts else per_run.assign(arm=[])


def arm_endpoints(endpoints: pd.DataFrame, cfg: ExperimentConfig, column: str = "endpoint") -> pd.DataFrame:
    """One row per run of each study arm (`arm_runs`) from endpoints.csv's frame: `arm`, `run_id`, `seed`,
    `base`, `status`, and `endpoint` taken from its `column` (the study's endpoint, or another per-run
    value such as `heldout/sampled_reward`); NaN for a failed or missing run."""
    rows = arm_runs(endpoints, cfg)
    value = rows[column].to_numpy(dtype=float) if column in rows else np.full(len(rows), math.nan)
    value = np.where(rows["status"].isin(EXCLUDED), math.nan, value)
    return rows[["arm", "run_id", "seed", "base", "status"]].assign(endpoint=value)


def arms_table(cfg: ExperimentConfig, per_arm: pd.DataFrame, endpoints: pd.DataFrame) -> pd.DataFrame:
    """One row per arm: the endpoint over its units (seeds, or base means with `unit: base`) from
    `per_arm` (`arm_endpoints`), its interval cut to the metric's range (a held-out score's to [0, 1]),
    and the seed means of the descriptive per-run values (`DESCRIPTIVE`) of its runs that trained, from
    endpoints.csv's frame."""
    by_base = cfg.study.unit == "base"
    rows = []
    for arm, prefix in cfg.study.arms.items():
        sub = per_arm[per_arm["arm"] == arm]
        used = endpoints[endpoints["run_id"].isin(sub.loc[sub["status"].isin(("ok", "diverged")), "run_id"])]
        units = finite(sub["endpoint"])
        bases = {}
        if by_base:
            units, n_bases = paired.arm_units(per_arm, arm)
            bases = {"bases": n_bases}
        ci = t_interval(units, bounds=value_range(cfg.study.endpoint.metric))
        rows.append(
            {
                "arm": arm,
                "cell": prefix,
                "runs": len(sub),
                "n": int(np.isfinite(sub["endpoint"].to_numpy(dtype=float)).sum()),
                **bases,
                "diverged": int((sub["status"] == "diverged").sum()),
                "endpoint": ci.estimate,
                "low": ci.low,
                "high": ci.high,
                "sd": sample_sd(units),
                **{column: finite_mean(used[column]) for column in DESCRIPTIVE},
            }
        )
    columns = [*ARM_COLUMNS[:4], "bases", *ARM_COLUMNS[4:]] if by_base else ARM_COLUMNS
    return pd.DataFrame(rows, columns=columns)


# a contrast of a fixed sequence after one that could not be tested: it has its own p, but the sequence
# stopped before it (fp8rl.stats.multiplicity.fixed_sequence)
SEQUENCE_ENDED = "no decision (the fixed sequence ended at an earlier contrast without a test)"


def untested(row: dict) -> str:
    """Why a contrast row has no p: fewer than two units (bases that both arms have, or seeds of either
    arm), or units that all gave one value (a paired difference, or both arms' seeds, without spread)."""
    n = row["bases"] if "bases" in row else min(row["n_arm"], row["n_reference"])
    return "no test (n < 2)" if n < 2 else "no test (no spread among the units)"


def contrasts_table(endpoints: pd.DataFrame, study: StudyConfig, *, planned: bool) -> pd.DataFrame:
    """The planned (adjusted, with a decision) or exploratory (unadjusted, no decision) contrasts."""
    contrasts = study.planned if planned else study.exploratory
    m = len(study.planned)
    alpha = study.alpha / m if planned and study.multiplicity == "holm" else study.alpha  # power's level

    def seeds(arm: str) -> np.ndarray:
        return endpoints[endpoints["arm"] == arm]["endpoint"].to_numpy(dtype=float)

    if study.unit == "base":
        rows = [paired.paired_contrast_row(c, endpoints, study, alpha) for c in contrasts]
    else:
        rows = [contrast_row(c, seeds(c.arm), seeds(c.reference), study, alpha) for c in contrasts]
    if planned:
        p = [r["p"] for r in rows]
        adj = ADJUSTMENTS[study.multiplicity](p)
        for r, pa in zip(rows, adj, strict=True):
            r["p_adjusted"] = pa
            r["decision"] = (
                (untested(r) if not math.isfinite(r["p"]) else SEQUENCE_ENDED) if not math.isfinite(pa)
                else ("reject H0: no difference" if pa < study.alpha else "not rejected")
            )  # fmt: skip
    else:
        for r in rows:
            r["p_adjusted"], r["decision"] = math.nan, "exploratory"
    return pd.DataFrame(rows, columns=contrast_columns(study))


def arms_view(table: pd.DataFrame) -> pd.DataFrame:
    by_base = "bases" in table
    return pd.DataFrame(
        {
            "arm": table["arm"],
            "cell": table["cell"],
            "n/runs": [f"{n}/{r}" for n, r in zip(table["n"], table["runs"], strict=True)],
            **({"bases": table["bases"].astype(str)} if by_base else {}),
            "diverged": table["diverged"].astype(str),
            "endpoint [95% CI]": [cell_interval(*x) for x in zip(table["endpoint"], table["low"], table["high"], strict=True)],
            "sd": table["sd"].map(cell_num),
            "mismatch KL step 1": table["mismatch_kl_step1"].map(lambda v: "" if not math.isfinite(v) else f"{v:.3g}"),
            "entropy step 1": table["entropy_step1"].map(cell_num),
            CLIP_LOW_NEG: table["clip_low_neg"].map(lambda v: "" if not math.isfinite(v) else f"{100 * v:.2f} %"),
            "excess clip": table["excess_clip"].map(lambda v: "" if not math.isfinite(v) else f"{100 * v:+.2f} pp"),
        }
    )  # fmt: skip


def contrasts_view(table: pd.DataFrame) -> pd.DataFrame:
    by_base = "bases" in table
    if by_base:
        n = [f"{b} bases × {s} seeds" for b, s in zip(table["bases"], table["seeds_per_base"], strict=True)]
    else:
        n = [f"{a} vs {b}" for a, b in zip(table["n_arm"], table["n_reference"], strict=True)]
    return pd.DataFrame(
        {
            "contrast": table["contrast"],
            "arm − reference": [f"{a} − {b}" for a, b in zip(table["arm"], table["reference"], strict=True)],
            "n": n,
            "difference [95% CI]": [
                cell_interval(*x) for x in zip(table["difference"], table["low"], table["high"], strict=True)
            ],
            ("p (paired t)" if by_base else "p (Welch)"): table["p"].map(cell_num),
            "p adjusted": table["p_adjusted"].map(cell_num),
            "decision": table["decision"],
            "power (observed SD)": table["power_observed"].map(lambda v: cell_num(v, 2)),
            ("power (planned SD of the per-base difference)" if by_base else "power (planned SD)"): table[
                "power_planned"
            ].map(lambda v: cell_num(v, 2)),
            "question": table["question"],
        }
    )


def study_tables(
    endpoints: pd.DataFrame, cfg: ExperimentConfig
) -> dict[str, tuple[pd.DataFrame, pd.DataFrame, list[str]]]:
    """`{table name: (csv frame, markdown view, notes)}` for STUDY_TABLES, from endpoints.csv's frame."""
    per_arm = arm_endpoints(endpoints, cfg)
    arm_notes, planned_notes, exploratory_notes = _notes(cfg.study)
    arms = arms_table(cfg, per_arm, endpoints)
    planned = contrasts_table(per_arm, cfg.study, planned=True)
    exploratory = contrasts_table(per_arm, cfg.study, planned=False)
    return {
        "arms": (arms, arms_view(arms), arm_notes),
        "planned": (planned, contrasts_view(planned), planned_notes),
        "exploratory": (exploratory, contrasts_view(exploratory), exploratory_notes),
    }


SECTION_TITLES = {
    "planned": "Planned contrasts (pre-registered)",
    "exploratory": "Exploratory contrasts (not pre-registered tests)",
    "arms": "Study arms: endpoint per arm",
}
