"""Per-run numbers that the comparison table aggregates over seeds.

`run_summaries(runset)` gives one row per run: the run id columns, `status`, the stability
diagnostics reduced over that run's steps (`DIAGNOSTICS`), and the final eval scores (`{task}/{metric}`
columns). A metric a run never logged stays NaN ("absent, never 0", docs/architecture.md#metrics).
"""

from __future__ import annotations

import pandas as pd

from fp8rl.report.load import ID_COLUMNS, RunSet

# (column, metrics.jsonl name, reduction over steps, description)
DIAGNOSTICS = (
    ("final_reward", "reward/mean", "last", "reward/mean at the run's last step"),
    ("best_reward", "reward/mean", "max", "highest reward/mean of any step"),
    ("peak_entropy", "entropy", "max", "highest entropy of any step"),
    ("clip_low_neg", "clip/low_neg", "mean", "mean over steps of clip/low_neg (A<0 tokens with r < L)"),
    ("phantom_low_neg", "phantom/low_neg", "mean", "mean over steps of phantom/low_neg"),
    ("mismatch_kl_k3", "mismatch/kl_k3", "mean", "mean over steps of mismatch/kl_k3 (trainer vs rollout)"),
)


def eval_keys(runset: RunSet) -> list[str]:
    """The eval scores present, lm_eval first, each `{task}/{metric}`, in a stable order."""
    keys: list[str] = []
    for suite in ("lm_eval", "agent"):
        for key in sorted(runset.metric(suite)["metric"].unique()):
            if key not in keys:
                keys.append(key)
    return keys


def run_summaries(runset: RunSet) -> pd.DataFrame:
    """One row per run with its diagnostics and eval scores (NaN where absent)."""
    out = runset.runs[[*ID_COLUMNS, "status"]].set_index("run_id")
    train = runset.metric("train").sort_values(["run_id", "step"])
    for column, metric, how, _ in DIAGNOSTICS:
        series = train[train["metric"] == metric].groupby("run_id")["value"]
        reduced = series.last() if how == "last" else series.agg(how)
        out[column] = reduced.reindex(out.index)
    evals = runset.values[runset.values["source"].isin(["lm_eval", "agent"])]
    for key in eval_keys(runset):
        out[key] = evals[evals["metric"] == key].groupby("run_id")["value"].mean().reindex(out.index)
    return out.reset_index()
