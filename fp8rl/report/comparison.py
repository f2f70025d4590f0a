"""The comparison table: per (algorithm, model, granularity), each variant against bf16 over seeds.

One row per (algo, model, granularity group, variant). The `bf16` runs (granularity `none`) are the
reference of every granularity group of their algo/model, so their row repeats in each group. Columns:

- `runs`, `ok`, `diverged`, `failed`, `missing`: counts over the variant's seeds. Every run is counted.
- per eval score `E` (`{task}/{metric}`): `E mean`, `E ci_low`, `E ci_high`, `E n` (Student t over the
  seeds that have the score) and `E delta`, `E delta_ci_low`, `E delta_ci_high` (vs bf16, Welch t).
- per stability diagnostic (summaries.DIAGNOSTICS): the mean over seeds of the per-run value, `{col} n`.

Seeds contribute when their run is `ok` or `diverged` (a diverged run's collapse belongs in the
numbers); `failed` and `missing` runs are counted only. Non-finite per-run values are left out of the
means (the diverged count shows those runs). n = 1 gives NaN bounds (stats.NO_CI_NOTE).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fp8rl.report.load import STATUSES, RunSet
from fp8rl.report.stats import t_interval, welch_interval
from fp8rl.report.summaries import DIAGNOSTICS, eval_keys, run_summaries
from fp8rl.vocabulary import NO_GRANULARITY, VARIANT_SPECS, VARIANTS

USED_STATUSES = ("ok", "diverged")


def _groups(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(algo, model, granularity group) in matrix order; `none` when an algo/model has only bf16."""
    out = []
    for (algo, model), sub in runs.groupby(["algo", "model"], sort=False):
        grans = [g for g in dict.fromkeys(sub["granularity"]) if g != NO_GRANULARITY]
        out += [(algo, model, g) for g in grans or [NO_GRANULARITY]]
    return out


def _finite_mean(values: pd.Series) -> tuple[float, int]:
    x = values.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    return (float(x.mean()) if x.size else math.nan), int(x.size)


def comparison_table(runset: RunSet) -> pd.DataFrame:
    """The comparison table as numbers (see the module docstring for its columns)."""
    summaries = run_summaries(runset)
    keys = eval_keys(runset)
    rows = []
    for algo, model, gran in _groups(runset.runs):
        cell = summaries[(summaries["algo"] == algo) & (summaries["model"] == model)]
        ref = cell[(cell["variant"] == "bf16") & cell["status"].isin(USED_STATUSES)]
        present = [v for v in VARIANTS if v in set(cell["variant"])]
        for variant in present:
            want = gran if VARIANT_SPECS[variant].fp8 else NO_GRANULARITY
            runs = cell[(cell["variant"] == variant) & (cell["granularity"] == want)]
            if runs.empty:
                continue
            used = runs[runs["status"].isin(USED_STATUSES)]
            row: dict = {"algo": algo, "model": model, "granularity": gran, "variant": variant}
            row["runs"] = len(runs)
            row |= {s: int((runs["status"] == s).sum()) for s in STATUSES}
            for key in keys:
                ci = t_interval(used[key])
                row |= {f"{key} mean": ci.estimate, f"{key} ci_low": ci.low, f"{key} ci_high": ci.high}
                row[f"{key} n"] = ci.n
                if variant == "bf16" or ref.empty:
                    delta = (math.nan, math.nan, math.nan)
                else:
                    d = welch_interval(used[key], ref[key])
                    delta = (d.estimate, d.low, d.high)
                row |= dict(
                    zip((f"{key} delta", f"{key} delta_ci_low", f"{key} delta_ci_high"), delta, strict=False)
                )
            for column, *_ in DIAGNOSTICS:
                mean, n = _finite_mean(used[column])
                row |= {column: mean, f"{column} n": n}
            rows.append(row)
    return pd.DataFrame(rows)
