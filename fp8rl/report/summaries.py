"""What the per-run endpoints (fp8rl.report.endpoints) read off the runs besides their steps' values: the
eval scores present (`eval_keys`) and the entropy peak over its early baseline (`peak_over_baseline`).

`peak_entropy_rel` is relative, so a spike shows whatever the entropy level: the highest entropy after
the early-steps baseline divided by that baseline, the median entropy of the first `baseline_steps`
steps (`stability.baseline_steps`, the baseline the trainer's spike detector uses). Below 1 the entropy
only fell after the baseline; the detector calls a run diverged above `stability.entropy_spike_k`. Runs
with no step after the baseline window, or a baseline that is not positive, have NaN.
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
