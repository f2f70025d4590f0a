"""The base model as the unit of a study (`study.unit: base`, fp8rl.config.study).

Where a tier's runs start from several base models (`sft.per_seed`, `sft.bases`), seeds are nested in
bases: two seeds of one base are not independent replicates of the question "does this arm change the
endpoint?". So each arm's per-run endpoints (fp8rl.report.planned.arm_endpoints: endpoints.csv's
`endpoint` and `base` columns) are first averaged within base (finite endpoints only, never imputed),
and a contrast `arm` − `reference` is a paired t-test over the bases that have a value in both arms:

- d_b = mean endpoint of `arm` on base b − that of `reference` on base b;
- `difference` = mean(d_b), its 95 % interval and two-sided p from scipy.stats.ttest_1samp(d) (a paired
  t-test), df = bases − 1;
- power: the exact power of that test (noncentral t, df = bases − 1, noncentrality
  effect · √bases / sd) to detect `study.min_effect`, with the observed SD of the d_b
  (`power_observed`) and with `study.planning_sd`, read as the SD of the per-base difference
  (`power_planned`).

Each row also says how many bases were paired and how many seeds each base carried in each arm.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from fp8rl.config import ContrastConfig, StudyConfig
from fp8rl.stats.intervals import sample_sd
from fp8rl.stats.power import paired_power

# The columns the base-unit contrast tables add after `n_reference`.
BASE_COLUMNS = ["bases", "seeds_per_base"]
# Said in the notes of the per-variant tables (comparison, mechanism) of a `unit: base` tier, whose
# intervals and tests take the seed as the unit.
NESTED_SEEDS_NOTE = (
    "This tier's seeds are nested in base models (study.unit: base): the intervals and tests of this "
    "table take each seed as an independent unit, which seeds of one base are not; read them as "
    "descriptions. The study's tests, paired over bases, are in the planned and exploratory tables."
)


def seed_unit_notes(study: StudyConfig | None, notes: list[str]) -> list[str]:
    """`notes` with `NESTED_SEEDS_NOTE` added where the study's unit is the base."""
    return [*notes, NESTED_SEEDS_NOTE] if study is not None and study.unit == "base" else notes


def base_means(endpoints: pd.DataFrame, arm: str) -> pd.DataFrame:
    """Per base of `arm`'s runs with a finite endpoint: `endpoint` (their mean) and `seeds` (their
    count), indexed by base, in first-seen order."""
    sub = endpoints[endpoints["arm"] == arm]
    sub = sub[np.isfinite(sub["endpoint"].to_numpy(dtype=float))]
    grouped = sub.groupby("base", sort=False)["endpoint"]
    return pd.DataFrame({"endpoint": grouped.mean().astype(float), "seeds": grouped.size().astype(int)})


def _spread(counts: pd.Series) -> str:
    """`3` when every base carried 3 seeds, `2-3` when they differ, empty when none."""
    if counts.empty:
        return ""
    lo, hi = int(counts.min()), int(counts.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def paired_contrast_row(c: ContrastConfig, endpoints: pd.DataFrame, study: StudyConfig, alpha: float) -> dict:
    """The estimate, interval, paired test and power of one contrast over the bases both arms have
    (`alpha`: the level the power uses)."""
    a, b = base_means(endpoints, c.arm), base_means(endpoints, c.reference)
    shared = [base for base in a.index if base in b.index]
    d = (a.loc[shared, "endpoint"] - b.loc[shared, "endpoint"]).to_numpy(dtype=float)
    n = int(d.size)
    estimate, low, high, p = (float(d.mean()) if n else math.nan), math.nan, math.nan, math.nan
    sd = sample_sd(d)  # 0.0 for differences that agree up to float rounding
    if n >= 2 and sd > 0.0:
        res = stats.ttest_1samp(d, 0.0)
        ci = res.confidence_interval(0.95)
        low, high, p = float(ci.low), float(ci.high), float(res.pvalue)
    elif n >= 2:  # every base gave the same difference: a zero-width interval, no test
        low = high = estimate
    return {
        "contrast": c.name,
        "arm": c.arm,
        "reference": c.reference,
        "n_arm": int(a.loc[shared, "seeds"].sum()),
        "n_reference": int(b.loc[shared, "seeds"].sum()),
        "bases": n,
        "seeds_per_base": f"{_spread(a.loc[shared, 'seeds'])}/{_spread(b.loc[shared, 'seeds'])}" if n else "",
        "difference": estimate,
        "low": low,
        "high": high,
        "df": float(n - 1) if n >= 2 else math.nan,
        "p": p,
        "power_observed": paired_power(study.min_effect, sd, n, alpha),
        "power_planned": paired_power(study.min_effect, study.planning_sd, n, alpha),
        "question": c.question,
    }


def planned_notes(study: StudyConfig, endpoint: str, adjust: str) -> list[str]:
    """The planned table's notes for `unit: base`."""
    return [
        endpoint,
        "Unit: the base model (study.unit: base). Each arm's run endpoints are averaged within base; "
        f"`difference` = mean over the bases both arms have of (arm's base mean − reference's base mean), "
        f"95% paired t-interval [low, high], df = bases − 1; `p`: paired t-test, {study.sides}; "
        f"`p_adjusted`: {adjust}; `decision` at alpha {study.alpha:g}.",
        "`bases`: bases paired; `seeds_per_base`: seeds per base with an endpoint, arm/reference (a range "
        "where bases differ); `n_arm`, `n_reference`: their runs with an endpoint.",
        f"`power_observed`: the exact power of the paired t-test (noncentral t) to detect a difference of "
        f"±{study.min_effect:g} (study.min_effect) over the bases used, with the observed SD of the per-base "
        f"differences; `power_planned`: the same with study.planning_sd = {study.planning_sd:g}, the SD of "
        "the per-base difference assumed before the runs. "
        + (
            "With Holm both use alpha / (number of planned contrasts), a lower bound."
            if study.multiplicity == "holm"
            else "Both use alpha (with a fixed sequence, the level of the first contrast and of every "
            "later one reached)."
            if study.multiplicity == "fixed_sequence"
            else "Both use alpha."
        ),
    ]


def arm_units(endpoints: pd.DataFrame, arm: str) -> tuple[np.ndarray, int]:
    """(the arm's base means, the number of bases) for the arms table under `unit: base`."""
    means = base_means(endpoints, arm)
    return means["endpoint"].to_numpy(dtype=float), len(means)
