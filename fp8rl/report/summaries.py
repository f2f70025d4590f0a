"""What the per-run endpoints (fp8rl.report.endpoints) and the comparison's intervals read off the runs:
the eval scores present (`eval_keys`), the entropy peak over its early baseline (`peak_over_baseline`),
and per-step series.

`peak_entropy_rel` (`peak_over_baseline`) is relative, so a spike shows whatever the entropy level: the highest entropy after
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

from fp8rl.report.load import RunSet
from fp8rl.vocabulary import EVAL_SUITES


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
