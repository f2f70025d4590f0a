"""The comparison table: per (algorithm, model, granularity[, condition]), each variant against bf16.

One row per (algo, model, granularity group, condition group, variant). The `condition` column exists
only in matrices with FP8 conditions (`matrix.conditions`); there each fp8 run belongs to the group of
its granularity and condition. The `bf16` runs (granularity and condition `none`) are the reference of
every group of their algo/model, so their row repeats in each group. Columns:

- `runs`, `ok`, `diverged`, `failed`, `missing`: counts over the variant's seeds. Every run is counted.
- per eval score `E` (`{task}/{metric}`): `E mean`, `E ci_low`, `E ci_high`, `E n` (Student t over the
  seeds that have the score) and `E delta`, `E delta_ci_low`, `E delta_ci_high` (vs bf16, Welch t).
- per stability diagnostic (`DIAGNOSTICS`): the mean over seeds of the run's value in endpoints.csv
  (fp8rl.report.endpoints), `{col} n`.
- per-step metrics, the seed being the unit (stats.SEED_MEAN_METHOD): the mean of the runs' means over
  steps with the t-interval over those seed means, `clip_low_neg ci_low|ci_high` and its `delta`,
  `delta_ci_low`, `delta_ci_high` vs bf16 (Welch t on the seed means); `mismatch_kl_k3 ci_low|ci_high`.
- the paired section (`PAIRED`; FP8 variants, from the BF16 shadow pass of the same tokens):
  `phantom_low_neg`, `phantom_missed_neg` and `excess_clip` = their per-step difference, each with
  `ci_low`, `ci_high` and `n` (seeds), by the same t-interval over seed means.

Intervals are cut to the metric's range (stats.RANGE_METHOD: [0, 1] for proportions, declared in
stats.PROPORTIONS; [-1, 1] for their differences, excess clipping included).

Seeds contribute when their run is `ok` or `diverged` (a diverged run's collapse belongs in the
numbers); `failed` and `missing` runs are counted only. Non-finite per-run values are left out of the
means (the diverged count shows those runs). n = 1 gives NaN bounds (stats.NO_CI_NOTE).
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.load import STATUSES, RunSet
from fp8rl.report.methods import delta_range, value_range
from fp8rl.report.summaries import eval_keys
from fp8rl.stats.intervals import Interval, finite, finite_mean, t_interval
from fp8rl.stats.welch import welch_interval
from fp8rl.vocabulary import (
    CLIP_LOW_NEG,
    MISMATCH_KL_K3,
    NO_GRANULARITY,
    REFERENCE_VARIANT,
    VARIANT_SPECS,
    VARIANTS,
)

USED_STATUSES = ("ok", "diverged")
# (column, description): the per-run stability diagnostics of endpoints.csv the table averages over seeds
DIAGNOSTICS = (
    ("final_reward", "reward/mean at the run's last step"),
    ("best_reward", "highest reward/mean of any step"),
    (
        "peak_entropy_rel",
        "highest entropy after the first `stability.baseline_steps` steps ÷ their median entropy "
        "(> 1: entropy rose above its early baseline; a spike shows as a large value)",
    ),
    ("clip_low_neg", "mean over steps of clip/low_neg (A<0 tokens with r < L)"),
    ("mismatch_kl_k3", "mean over steps of mismatch/kl_k3 (trainer vs rollout)"),
)
# (column, metrics.jsonl name): per-step diagnostics that get a t-interval over the seeds' step means
STEP_INTERVALS = (("clip_low_neg", CLIP_LOW_NEG), ("mismatch_kl_k3", MISMATCH_KL_K3))
# per-step metrics whose difference to bf16 gets an interval
STEP_DELTAS = ("clip_low_neg",)
EXCESS = "excess_clip"
# (column, description): the paired FP8-vs-BF16-shadow section
PAIRED = (
    ("phantom_low_neg", "phantom/low_neg: A<0 shadow tokens clipped under the FP8 ratio, not under BF16"),
    ("phantom_missed_neg", "phantom/missed_neg: A<0 shadow tokens clipped under BF16, not under FP8"),
    (EXCESS, "excess clipping: phantom/low_neg − phantom/missed_neg per step (net gradients FP8 zeroes)"),
)
# the range of each paired column: excess clipping is a difference of two proportions
PAIRED_RANGES = {
    "phantom_low_neg": value_range("phantom/low_neg"),
    "phantom_missed_neg": value_range("phantom/missed_neg"),
    EXCESS: delta_range("phantom/low_neg"),
}


def has_conditions(runs: pd.DataFrame) -> bool:
    """Whether the runs come from a matrix with FP8 conditions."""
    return "condition" in runs and bool(runs["condition"].notna().any())


def _groups(runs: pd.DataFrame) -> list[tuple[str, str, str, str | None]]:
    """(algo, model, granularity group, condition group) in matrix order; granularity `none` (and
    condition None) when an algo/model has only bf16."""
    conds = has_conditions(runs)
    out = []
    for (algo, model), sub in runs.groupby(["algo", "model"], sort=False):
        fp8 = sub[sub["granularity"] != NO_GRANULARITY]
        grans = list(dict.fromkeys(fp8["granularity"]))
        names = list(dict.fromkeys(fp8["condition"])) if conds else [None]
        out += [(algo, model, g, c) for g in grans for c in names] or [(algo, model, NO_GRANULARITY, None)]
    return out


def _ci_cells(prefix: str, ci: Interval, *, n: bool = False) -> dict:
    out = {f"{prefix} ci_low": ci.low, f"{prefix} ci_high": ci.high}
    return out | ({prefix: ci.estimate, f"{prefix} n": ci.n} if n else {})


def _delta_cells(prefix: str, d: Interval) -> dict:
    return {f"{prefix} delta": d.estimate, f"{prefix} delta_ci_low": d.low, f"{prefix} delta_ci_high": d.high}


NO_INTERVAL = Interval(math.nan, math.nan, math.nan, 0)


def comparison_table(runset: RunSet, endpoints: pd.DataFrame) -> pd.DataFrame:
    """The comparison table as numbers (see the module docstring for its columns), from the per-run values
    of endpoints.csv's frame (fp8rl.report.endpoints.endpoints_table): each run's eval scores, diagnostics
    and means over its steps (the seed means the intervals are taken over)."""
    keys = eval_keys(runset)
    conds = has_conditions(runset.runs)

    rows = []
    for algo, model, gran, cond in _groups(runset.runs):
        cell = endpoints[(endpoints["algo"] == algo) & (endpoints["model"] == model)]
        ref = cell[(cell["variant"] == REFERENCE_VARIANT) & cell["status"].isin(USED_STATUSES)]
        present = [v for v in VARIANTS if v in set(cell["variant"])]
        for variant in present:
            fp8 = VARIANT_SPECS[variant].fp8
            runs = cell[
                (cell["variant"] == variant) & (cell["granularity"] == (gran if fp8 else NO_GRANULARITY))
            ]
            if conds and fp8:
                runs = runs[runs["condition"] == cond]
            if runs.empty:
                continue
            used = runs[runs["status"].isin(USED_STATUSES)]
            row: dict = {"algo": algo, "model": model, "granularity": gran}
            row |= {"condition": cond} if conds else {}
            row["variant"] = variant
            row["runs"] = len(runs)
            row |= {s: int((runs["status"] == s).sum()) for s in STATUSES}
            for key in keys:
                ci = t_interval(used[key], bounds=value_range(key))
                row |= {f"{key} mean": ci.estimate, f"{key} ci_low": ci.low, f"{key} ci_high": ci.high}
                row[f"{key} n"] = ci.n
                no_delta = variant == REFERENCE_VARIANT or ref.empty
                d = NO_INTERVAL if no_delta else welch_interval(used[key], ref[key], bounds=delta_range(key))
                row |= _delta_cells(key, d)
            for column, *_ in DIAGNOSTICS:
                row |= {column: finite_mean(used[column]), f"{column} n": finite(used[column]).size}
            for column, metric in STEP_INTERVALS:
                row |= _ci_cells(column, t_interval(used[column], bounds=value_range(metric)))
                if column in STEP_DELTAS:
                    d = NO_INTERVAL
                    if variant != REFERENCE_VARIANT and not ref.empty:
                        d = welch_interval(used[column], ref[column], bounds=delta_range(metric))
                    row |= _delta_cells(column, d)
            for column, _ in PAIRED:
                ci = t_interval(used[column], bounds=PAIRED_RANGES[column]) if fp8 else NO_INTERVAL
                row |= _ci_cells(column, ci, n=True)
            rows.append(row)
    return pd.DataFrame(rows)


def zero_width_notes(table: pd.DataFrame) -> list[str]:
    """A data note per interval of `table` (a `comparison_table`) over two or more seeds that has zero
    width: every seed gave the same value (a saturated benchmark scores 1 on every seed), so the interval
    measures no spread and shows nothing (the figures never count it as excluding 0:
    fp8rl.report.formats.excludes_zero). Benign: the data is sound, the interval only says nothing;
    the report lists these apart from its data problems."""
    keys = [k for k in ("algo", "model", "granularity", "condition", "variant") if k in table.columns]
    out = []
    for _, row in table.iterrows():
        cell = "/".join(str(row[k]) for k in keys)
        for col in table.columns:
            if not col.endswith("ci_low"):
                continue
            lo, hi = row[col], row.get(col[: -len("low")] + "high")
            if pd.isna(lo) or pd.isna(hi) or lo != hi:
                continue
            metric = col[: -len(" ci_low")] if col.endswith(" ci_low") else col[: -len("_ci_low")]
            what = "its difference from bf16" if col.endswith("delta_ci_low") else "its seeds"
            out.append(
                f"{cell} {metric}: a zero-width 95 % interval [{lo:.6g}, {hi:.6g}] over {what} (every seed "
                "gave the same value: no spread measured); not a significant result"
            )
    return out
