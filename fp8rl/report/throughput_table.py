"""The throughput table: tokens/s per phase, step time, speedup vs bf16, calibration overhead.

One row per (algo, model, variant, granularity), and per FP8 condition in a matrix that has them (a
study tier's doses are not pooled), averaged over the seeds whose run wrote a `throughput.json` (any
status: a run that diverged still measured its speed). Columns:

- `runs_measured`: how many seeds have a throughput.json.
- `execution`: `emulated` (low precision rounded in software, docs/architecture.md#emulation-on-cpu) or `hardware` (FP8, or bf16,
  units), `mixed` if seeds disagree; `device` and `fp8_backend` as written by the trainer.
- `step_time_s`; `speedup_vs_bf16` = mean bf16 step time of the same algo/model ÷ this step time.
- `{phase} tok/s` for rollout, logprob, train, calib (`tokens_per_s` of throughput.json).
- `calib_overhead_pct` = 100 × calib seconds ÷ (rollout + logprob + train seconds), per run, then
  averaged: the time calibrated clipping's shadow pass adds. Blank where a run has no calib phase.
- `peak_mem_mb`.
"""

from __future__ import annotations

import math

import pandas as pd

from fp8rl.report.comparison import has_conditions
from fp8rl.report.load import RunSet
from fp8rl.stats.intervals import finite_mean
from fp8rl.vocabulary import REFERENCE_VARIANT

PHASES = ("rollout", "logprob", "train", "calib")
BASE_PHASES = ("rollout", "logprob", "train")
KEYS = ["algo", "model", "variant", "granularity"]


def _label(values: pd.Series) -> str:
    vals = {str(v) for v in values.dropna()}
    return vals.pop() if len(vals) == 1 else ("mixed" if vals else "")


def _execution(values: pd.Series) -> str:
    flags = {bool(v) for v in values.dropna()}
    if not flags:
        return ""
    if len(flags) > 1:
        return "mixed"
    return "emulated" if flags.pop() else "hardware"


def throughput_table(runset: RunSet) -> pd.DataFrame:
    """The throughput table as numbers (see the module docstring for its columns)."""
    tp = runset.metric("throughput")
    per_run = tp.pivot_table(index="run_id", columns="metric", values="value", aggfunc="first")
    base = [f"{p}/seconds" for p in BASE_PHASES]
    if "calib/seconds" in per_run and all(c in per_run for c in base):
        per_run["calib_overhead_pct"] = 100.0 * per_run["calib/seconds"] / per_run[base].sum(axis=1)
    runs = runset.runs.set_index("run_id")
    measured = runs.loc[runs.index.intersection(per_run.index)]
    per_run = per_run.join(measured[KEYS + ["emulated", "device", "fp8_backend"]], how="inner")

    keys = KEYS + ["condition"] if has_conditions(runs) else KEYS  # a study tier's doses apart
    rows = []
    for key, sub in runs.groupby(keys, sort=False):
        row = dict(zip(keys, key, strict=False))
        have = per_run[per_run.index.isin(sub.index)]
        row["runs_measured"] = len(have)
        row["execution"] = _execution(have["emulated"]) if len(have) else ""
        row["device"] = _label(have["device"]) if len(have) else ""
        row["fp8_backend"] = _label(have["fp8_backend"]) if len(have) else ""
        for col, name in [("step_time_s", "step_time_s")] + [
            (f"{p}/tokens_per_s", f"{p} tok/s") for p in PHASES
        ]:
            row[name] = _mean(have, col)
        row["calib_overhead_pct"] = _mean(have, "calib_overhead_pct")
        row["peak_mem_mb"] = _mean(have, "peak_mem_mb")
        rows.append(row)
    table = pd.DataFrame(rows)
    ref = table[table["variant"] == REFERENCE_VARIANT].set_index(["algo", "model"])["step_time_s"]
    table["speedup_vs_bf16"] = [
        ref.get((a, m), math.nan) / t if t and not math.isnan(t) else math.nan
        for a, m, t in zip(table["algo"], table["model"], table["step_time_s"], strict=False)
    ]
    order = [*keys, "runs_measured", "execution", "device", "fp8_backend", "step_time_s", "speedup_vs_bf16"]
    return table[order + [c for c in table.columns if c not in order]]


def _mean(frame: pd.DataFrame, column: str) -> float:
    if column not in frame or frame.empty:
        return math.nan
    return finite_mean(frame[column])
