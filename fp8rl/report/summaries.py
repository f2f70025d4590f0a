"""Per-run numbers that the comparison table aggregates over seeds, and per-step series for intervals.

`run_summaries(runset, baseline_steps)` gives one row per run: the run id columns, `status`, the
stability diagnostics reduced over that run's steps (`DIAGNOSTICS`), and the final eval scores
(`{task}/{metric}` columns). A metric a run never logged stays NaN ("absent, never 0",
docs/architecture.md#metrics).

`peak_entropy_rel` is relative, so a spike shows whatever the entropy level: the highest entropy after
the early-steps baseline divided by that baseline, the median entropy of the first `baseline_steps`
steps (`stability.baseline_steps`, the baseline the trainer's spike detector uses). Below 1 the entropy
only fell after the baseline; the detector calls a run diverged above `stability.entropy_spike_k`. Runs
with no step after the baseline window, or a baseline that is not positive, have NaN.

`step_series(runset, metrics)` gives, per metric, each run's per-step values in step order (the input of
the t-interval over seed means, stats.seed_interval); `step_difference` the per-step difference of two
metrics logged at the same steps (a paired difference: the same tokens of the same step).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fp8rl.report.load import ID_COLUMNS, RunSet
from fp8rl.vocabulary import CLIP_LOW_NEG, EVAL_SUITES, MISMATCH_KL_K3, REWARD_MEAN

# (column, metrics.jsonl name, reduction over steps, description)
DIAGNOSTICS = (
    ("final_reward", REWARD_MEAN, "last", "reward/mean at the run's last step"),
    ("best_reward", REWARD_MEAN, "max", "highest reward/mean of any step"),
    (
        "peak_entropy_rel",
        "entropy",
        "peak_rel",
        "highest entropy after the first `stability.baseline_steps` steps ÷ their median entropy "
        "(> 1: entropy rose above its early baseline; a spike shows as a large value)",
    ),
    ("clip_low_neg", CLIP_LOW_NEG, "mean", "mean over steps of clip/low_neg (A<0 tokens with r < L)"),
    ("mismatch_kl_k3", MISMATCH_KL_K3, "mean", "mean over steps of mismatch/kl_k3 (trainer vs rollout)"),
)


def eval_keys(runset: RunSet) -> list[str]:
    """The eval scores present, lm_eval first, each `{task}/{metric}`, in a stable order."""
    keys: list[str] = []
    for suite in EVAL_SUITES:
        for key in sorted(runset.metric(suite)["metric"].unique()):
            if key not in keys:
                keys.append(key)
    return keys


def peak_over_baseline(values: np.ndarray, baseline_steps: int) -> float:
    """max(finite values after the first `baseline_steps`) ÷ median(the first `baseline_steps`)."""
    head, tail = values[:baseline_steps], values[baseline_steps:]
    head, tail = head[np.isfinite(head)], tail[np.isfinite(tail)]
    if len(values) <= baseline_steps or head.size == 0 or tail.size == 0:
        return np.nan
    base = float(np.median(head))
    return float(tail.max()) / base if base > 0 else np.nan


def run_summaries(runset: RunSet, baseline_steps: int) -> pd.DataFrame:
    """One row per run with its diagnostics and eval scores (NaN where absent)."""
    out = runset.runs[[*ID_COLUMNS, "status"]].set_index("run_id")
    train = runset.metric("train").sort_values(["run_id", "step"])
    for column, metric, how, _ in DIAGNOSTICS:
        series = train[train["metric"] == metric].groupby("run_id")["value"]
        if how == "peak_rel":
            reduced = series.agg(lambda v: peak_over_baseline(v.to_numpy(dtype=float), baseline_steps))
        else:
            reduced = series.last() if how == "last" else series.agg(how)
        out[column] = reduced.reindex(out.index)
    evals = runset.values[runset.values["source"].isin(list(EVAL_SUITES))]
    for key in eval_keys(runset):
        out[key] = evals[evals["metric"] == key].groupby("run_id")["value"].mean().reindex(out.index)
    return out.reset_index()


def step_series(runset: RunSet, metrics: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """metric -> run id -> that run's values of the metric in step order (runs that logged it)."""
    train = runset.metric("train")
    train = train[train["metric"].isin(metrics)].sort_values(["run_id", "step"])
    out: dict[str, dict[str, np.ndarray]] = {m: {} for m in metrics}
    for (metric, run_id), sub in train.groupby(["metric", "run_id"], sort=False):
        out[metric][run_id] = sub["value"].to_numpy(dtype=float)
    return out


def step_difference(runset: RunSet, a: str, b: str) -> dict[str, np.ndarray]:
    """run id -> per-step `a - b` at the steps where the run logged both, in step order."""
    train = runset.metric("train")
    both = train[train["metric"].isin([a, b])].pivot_table(
        index=["run_id", "step"], columns="metric", values="value", aggfunc="first", dropna=False
    )
    if a not in both or b not in both:
        return {}
    diff = (both[a] - both[b]).dropna()
    return {run_id: sub.to_numpy(dtype=float) for run_id, sub in diff.groupby(level="run_id")}
