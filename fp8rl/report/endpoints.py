"""Per-run endpoints: one row per run of the matrix, every number the report's intervals and tests use.

`endpoints.csv` is what makes a publication recomputable: the comparison intervals, the planned and
exploratory contrasts, the control check (fp8rl.report.control) and the stability table's seed means
each aggregate one value per run, and that value is a column here. Every cell of the matrix has a row,
whatever its status (a failed or missing run has blank numbers and is never imputed).

Columns (`COLUMNS`, then one per eval score `{task}/{metric}`):

- identity: `run_id`, `algo`, `model`, `base` (the base model the run started from: `{model}/seed{b}`
  with `sft.per_seed`, b the run's seed, or its seed % `sft.bases`; `{model}` for a tier's shared
  scratch base, the model's `source` for a pretrained one), `variant`, `granularity`, `condition` (blank outside matrices with FP8 conditions), `seed`,
  `noise` (the run's `fp8.noise_scale`: the dose, or the scale its `fp8.target_kl` search found, from
  its `noise.json`; 1 for bf16; a `bf16_floor` run's kernel floor scale, fixed or found for its
  `floor.target_kl`), `target_kl` (blank unless the run's condition or floor names one), `arm` (the
  study arms the run belongs to,
  `;`-joined; blank without a `study` section);
- status: `status`, `reason`, `last_step` (the last step summary.json records), `steps_planned`,
  `div_step` and `div_kind` (the first divergence, from summary.json's `divergence`; blank unless
  diverged);
- reward windows: `reward_first`, the mean `reward/mean` over the first window (steps 1 to
  ceil(`FIRST_FRAC` × schedule.steps)); `reward_last`, over the last window (the last
  ceil(`LAST_FRAC` × schedule.steps) planned steps); `reward_rise` = last − first. A diverged run that
  stopped before the last window scores 0 there (it earned no reward), as the study endpoint does;
- entropy and output: `entropy_first`, `entropy_last` (the same windows), `entropy_peak` (the highest
  finite entropy of the run), `entropy_baseline` (median of the first `stability.baseline_steps` logged
  values), `peak_entropy_rel` (highest entropy after the first `stability.baseline_steps` steps ÷ their
  median: the comparison's and the stability report's), `gibberish_rate` (mean `gibberish/rate` over the
  run), `gibberish_last` (over the last window);
- the comparison's per-run values: `final_reward`, `best_reward`, and the per-step metrics reduced to
  the run's mean over its finite steps (the value the t-interval over seeds takes, fp8rl.report.comparison):
  `clip_low_neg`, `mismatch_kl_k3`, `phantom_low_neg`, `phantom_missed_neg`, `excess_clip` (their
  per-step difference), `calib_low`, `calib_high`, `calib_floor_binds` (the share of the calibrated
  updates whose lower bound `calib.low_range`'s floor held up: there the calibration did not complete,
  and `excess_clip` is what remained);
- the study's: `endpoint` (study.endpoint, `study_endpoint`; blank without a study or for a run of no
  arm),
  `mismatch_kl_step1`, `entropy_step1`;
- the stability report's: `final_acc` (mean `acc/mean` over the last `ACC_WINDOW` steps), `best_acc`
  (its per-run rows, stability.run_stability, are this table's: divergence, last step, accuracy,
  entropy peak and gibberish);
- the mismatch in the field's units (fp8rl.rl.mismatch): for `mismatch` (trainer vs rollout) and
  `shadow_mismatch` (the FP8 trainer vs its BF16 shadow), each unit's run mean `{prefix}_{unit}`, its
  means over the first and the last window, `{prefix}_{unit}_first` and `{prefix}_{unit}_last`, and its
  median over the run's steps `{prefix}_{unit}_median` (the per-step k3 and tmpe are means of heavy-
  tailed per-token terms, exp(±Δ): one token with a large |Δlogp| can dominate a step, and the median
  step says what a typical step saw) (blank where the run logged none: a bf16 run has no shadow);
- the held-out bf16 endpoint (`eval.heldout`; fp8rl.engine.heldout): the run's own scores are the eval
  columns `heldout/greedy_acc`, `heldout/sampled_reward`, `heldout/sampled_format`; its base's scores
  `base_heldout_{metric}` (from `base/{base}/eval/heldout.json` beside the runs) and the run's gain over
  its base, `heldout_gain_{metric}` = run − base.

The CSV keeps ten significant digits (`FLOAT_FORMAT`), so a reader's recomputation agrees with the
published tables to the digits they print.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from fp8rl.config import ExperimentConfig, RunSpec, arm_cell, resolve_run
from fp8rl.io import loads_json
from fp8rl.report.load import RunSet
from fp8rl.report.summaries import eval_keys, peak_over_baseline
from fp8rl.stats.intervals import finite_mean
from fp8rl.vocabulary import (
    ACC_MEAN,
    CALIB_FLOOR_BINDS,
    CALIB_HIGH,
    CALIB_LOW,
    CLIP_LOW_NEG,
    EVAL_SUITES,
    GIBBERISH_RATE,
    HELDOUT_METRICS,
    MISMATCH_KL_K3,
    MISMATCH_ROLLOUT,
    MISMATCH_SHADOW,
    MISMATCH_UNITS,
    REWARD_MEAN,
)

FIRST_FRAC = 0.1  # the first window: the first 10 % of the planned steps
LAST_FRAC = 0.2  # the last window: the last 20 %
ACC_WINDOW = 5  # final_acc: the last 5 steps (and best_acc's moving window; fp8rl.report.stability)
FLOAT_FORMAT = "%.10g"
USED = ("ok", "diverged")

ID_COLUMNS = [
    "run_id", "algo", "model", "base", "variant", "granularity", "condition", "seed", "noise", "target_kl",
    "arm",
]  # fmt: skip
STATUS_COLUMNS = ["status", "reason", "last_step", "steps_planned", "div_step", "div_kind"]
WINDOW_COLUMNS = [
    "reward_first", "reward_last", "reward_rise", "entropy_first", "entropy_last", "entropy_peak",
    "entropy_baseline", "peak_entropy_rel", "gibberish_rate", "gibberish_last",
]  # fmt: skip
# (column, metrics.jsonl name): the run's mean over its finite steps
STEP_MEANS = (
    ("clip_low_neg", CLIP_LOW_NEG),
    ("mismatch_kl_k3", MISMATCH_KL_K3),
    ("phantom_low_neg", "phantom/low_neg"),
    ("phantom_missed_neg", "phantom/missed_neg"),
    ("calib_low", CALIB_LOW),
    ("calib_high", CALIB_HIGH),
    ("calib_floor_binds", CALIB_FLOOR_BINDS),
)
VALUE_COLUMNS = [
    "final_reward", "best_reward", *(c for c, _ in STEP_MEANS[:4]), "excess_clip", *(c for c, _ in STEP_MEANS[4:]),
    "endpoint", "mismatch_kl_step1", "entropy_step1", "final_acc", "best_acc",
]  # fmt: skip
MISMATCH_COLUMNS = [
    f"{prefix}_{unit}{window}"
    for prefix in (MISMATCH_ROLLOUT, MISMATCH_SHADOW)
    for unit in MISMATCH_UNITS
    for window in ("", "_first", "_last", "_median")
    if f"{prefix}_{unit}{window}" != "mismatch_kl_k3"  # the comparison's column, in VALUE_COLUMNS
]
HELDOUT_COLUMNS = [f"{kind}_{m}" for kind in ("base_heldout", "heldout_gain") for m in HELDOUT_METRICS]
COLUMNS = [*ID_COLUMNS, *STATUS_COLUMNS, *WINDOW_COLUMNS, *VALUE_COLUMNS, *MISMATCH_COLUMNS, *HELDOUT_COLUMNS]

NOTES = [
    "One row per run of the matrix, every status; blank: the run has no such value (never imputed).",
    f"`reward_first`: mean reward/mean over the first {100 * FIRST_FRAC:.0f} % of the planned steps; `reward_last`: "
    f"over the last {100 * LAST_FRAC:.0f} %; `reward_rise` = last − first. A diverged run that stopped before "
    "the last window scores 0 there.",
    "`entropy_*`: the same windows, the run's peak, the baseline (median of the first "
    "stability.baseline_steps steps) and `peak_entropy_rel` (peak after the baseline ÷ baseline); "
    "`gibberish_rate`: mean gibberish/rate over the run, `gibberish_last` over the last window.",
    "`clip_low_neg` ... `calib_high`: the run's mean over its finite steps (excess_clip = phantom/low_neg "
    "− phantom/missed_neg per step); `endpoint`: the study's pre-registered endpoint; `final_acc`: mean "
    f"acc/mean over the last {ACC_WINDOW} steps.",
    "`base`: the base model the run started from (one per seed with sft.per_seed).",
    "The CSV has every column at ten significant digits; this view shows the main ones.",
]
BASES_NOTE = (
    "`base`: the base model the run started from (sft.bases = {bases}: seed s starts from base s % {bases})."
)


def notes(cfg: ExperimentConfig) -> list[str]:
    """`NOTES`, with the `base` line naming `sft.bases` where the config sets it (as published otherwise)."""
    if cfg.sft.bases is None:
        return NOTES
    return [BASES_NOTE.format(bases=cfg.sft.bases) if n.startswith("`base`") else n for n in NOTES]


VIEW_COLUMNS = [
    "run_id", "base", "status", "div_step", "div_kind", "reward_first", "reward_last", "reward_rise",
    "entropy_peak", "entropy_last", "gibberish_rate", "endpoint",
]  # fmt: skip


def windows(steps: int) -> tuple[int, int]:
    """(last step of the first window, first step of the last window) of a run of `steps` planned steps
    (steps count from 1; each window has at least one step)."""
    first = max(1, math.ceil(round(FIRST_FRAC * steps, 9)))
    last = max(1, math.ceil(round(LAST_FRAC * steps, 9)))
    return first, steps - last + 1


def base_of(cfg: ExperimentConfig, spec: RunSpec) -> str:
    """The base model a run starts from (module docstring)."""
    return cfg.base_of(spec.model, spec.seed)


def _window_values(m: pd.DataFrame, status: str, steps: int, baseline_steps: int) -> dict:
    """The WINDOW_COLUMNS of one run from its step × metric frame `m`."""
    first_end, last_start = windows(steps)

    def col(metric: str) -> pd.Series:
        return m[metric] if metric in m else pd.Series(dtype=float)

    def window(metric: str, last: bool, empty_is_zero: bool = False) -> float:
        s = col(metric)
        s = s[s.index >= last_start] if last else s[s.index <= first_end]
        value = finite_mean(s)
        if math.isnan(value) and empty_is_zero and status == "diverged" and m.index.max() < last_start:
            return 0.0
        return value

    reward_first, reward_last = window(REWARD_MEAN, False), window(REWARD_MEAN, True, empty_is_zero=True)
    ent = col("entropy").to_numpy(dtype=float)
    finite = ent[np.isfinite(ent)]
    head = ent[~np.isnan(ent)][:baseline_steps]  # the stability table's baseline: the first logged values
    return {
        "reward_first": reward_first,
        "reward_last": reward_last,
        "reward_rise": reward_last - reward_first,
        "entropy_first": window("entropy", False),
        "entropy_last": window("entropy", True),
        "entropy_peak": float(finite.max()) if finite.size else math.nan,
        "entropy_baseline": float(np.median(head)) if head.size else math.nan,
        "peak_entropy_rel": peak_over_baseline(ent, baseline_steps) if ent.size else math.nan,
        "gibberish_rate": finite_mean(col(GIBBERISH_RATE)),
        "gibberish_last": window(GIBBERISH_RATE, True),
    }


def _mismatch_columns(m: pd.DataFrame, steps: int) -> dict:
    """MISMATCH_COLUMNS of one run: each unit's mean over the run and over the first and last window."""
    first_end, last_start = windows(steps)
    out = {}
    for prefix in (MISMATCH_ROLLOUT, MISMATCH_SHADOW):
        for unit in MISMATCH_UNITS:
            s = m[f"{prefix}/{unit}"] if f"{prefix}/{unit}" in m else pd.Series(dtype=float)
            name = f"{prefix}_{unit}"
            out[f"{name}_first"] = finite_mean(s[s.index <= first_end])
            out[f"{name}_last"] = finite_mean(s[s.index >= last_start])
            finite = s.to_numpy(dtype=float)
            finite = finite[np.isfinite(finite)]
            out[f"{name}_median"] = float(np.median(finite)) if finite.size else math.nan
            if name != "mismatch_kl_k3":
                out[name] = finite_mean(s)
    return out


def base_heldout(runs_dir: str | Path, cfg: ExperimentConfig, spec: RunSpec) -> dict[str, float]:
    """The held-out scores of the base `spec` starts from (`base/{base}/eval/heldout.json` beside the runs
    folder), metric -> value; empty when there is none or it cannot be read."""
    return read_heldout(Path(runs_dir).parent / "base" / base_folder(cfg, spec) / "eval" / "heldout.json")


def base_folder(cfg: ExperimentConfig, spec: RunSpec) -> str:
    """The folder under `{tier}/base/` of the base `spec` starts from, where the DAG scores it: the
    scratch base's name (`base_of`), or a pretrained model's own name (its one checkpoint)."""
    return base_of(cfg, spec) if cfg.model(spec.model).source == "scratch" else spec.model


def read_heldout(path: Path) -> dict[str, float]:
    """metric -> value of a held-out result file's `heldout` task (finite numbers only); empty when the
    file is missing or is not a result document."""
    results = read_json_object(path).get("results")
    out = {}
    for r in results if isinstance(results, list) else []:
        if isinstance(r, dict) and r.get("task") == "heldout" and isinstance(r.get("metric"), str):
            v = r.get("value")
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                out[r["metric"]] = float(v)
    return out


def _noise(cfg: ExperimentConfig, spec: RunSpec, runs_dir: str | Path) -> dict:
    """`noise` and `target_kl` of one run: the condition's scale, or the one its target search found."""
    from fp8rl.run_files import NOISE_FILE, RunDir

    resolved = resolve_run(cfg, spec)
    target = resolved.target_kl
    scale = resolved.mismatch_scale
    if target is not None:
        found = read_json_object(RunDir.of(runs_dir, spec.run_id).root / NOISE_FILE)
        value = found.get("noise_scale")
        scale = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    return {"noise": scale, "target_kl": math.nan if target is None else target}


def first_divergence(runs_dir: Path, run_id: str) -> dict:
    """summary.json's `divergence` (the first detection: kind, step, reason) of a run; {} when none."""
    from fp8rl.run_files import RunDir

    d = read_json_object(RunDir.of(runs_dir, run_id).summary).get("divergence")
    return d if isinstance(d, dict) else {}


def read_json_object(path: Path) -> dict:
    """The JSON object in `path`, or {} when it is missing, unreadable or not an object."""
    try:
        obj = loads_json(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _heldout_columns(run: dict[str, float], base: dict[str, float]) -> dict:
    """HELDOUT_COLUMNS of one run from its own held-out scores and its base's."""
    out = {}
    for metric in HELDOUT_METRICS:
        b = base.get(metric, math.nan)
        out[f"base_heldout_{metric}"] = b
        out[f"heldout_gain_{metric}"] = run.get(metric, math.nan) - b
    return out


def _value_columns(m: pd.DataFrame) -> dict:
    """The comparison's, the study's and the stability table's per-run values from `m`."""

    def col(metric: str) -> pd.Series:
        return m[metric] if metric in m else pd.Series(dtype=float)

    reward = col(REWARD_MEAN).dropna()
    acc = col(ACC_MEAN).dropna()
    out = {
        "final_reward": float(reward.iloc[-1]) if len(reward) else math.nan,
        "best_reward": float(reward.max()) if len(reward) else math.nan,
    }
    out |= {column: finite_mean(col(metric)) for column, metric in STEP_MEANS}
    out["excess_clip"] = finite_mean(col("phantom/low_neg") - col("phantom/missed_neg"))
    out["mismatch_kl_step1"] = finite_mean(col(MISMATCH_KL_K3)[col(MISMATCH_KL_K3).index == 1])
    out["entropy_step1"] = finite_mean(col("entropy")[col("entropy").index == 1])
    out["final_acc"] = float(acc.iloc[-ACC_WINDOW:].mean()) if len(acc) else math.nan
    out["best_acc"] = float(acc.rolling(ACC_WINDOW, min_periods=1).mean().max()) if len(acc) else math.nan
    return out


def study_endpoint(cfg: ExperimentConfig, status: str, m: pd.DataFrame | None, row: dict) -> float:
    """A study run's endpoint (`study.endpoint`, fp8rl.report.planned): the mean of its metric over the
    steps after `from_frac` of the planned steps (`m`: the run's step × metric frame), or, for a held-out
    metric, its final checkpoint's score (the eval column of `row`); NaN for a failed or missing run. A
    diverged run whose window holds no finite value (it stopped before it, or went NaN) scores 0 on a
    reward or accuracy endpoint (it earned nothing there) and NaN on any other metric (an entropy or a
    gibberish rate has no value that stands for "stopped": the run is left out, not imputed)."""
    e = cfg.study.endpoint
    if status not in USED:
        return math.nan
    if e.metric.startswith("heldout/"):  # one value per run: its final checkpoint, bf16 sampler
        return row.get(e.metric, math.nan)
    s = m[e.metric] if m is not None and e.metric in m else pd.Series(dtype=float)
    value = finite_mean(s[s.index > e.from_frac * cfg.schedule.steps])
    earned_nothing = math.isnan(value) and status == "diverged" and e.metric in (REWARD_MEAN, ACC_MEAN)
    return 0.0 if earned_nothing else value


def endpoints_table(
    runset: RunSet, cfg: ExperimentConfig, runs_dir: str | Path | None = None
) -> pd.DataFrame:
    """The per-run endpoints (module docstring), in matrix order; `runs_dir`: where the runs are (default
    `{results_dir}/{tier}/runs`), for their summary.json, noise.json and bases."""
    from fp8rl.run_files import runs_dir as tier_runs_dir

    runs_dir = tier_runs_dir(cfg.results_dir, cfg.tier) if runs_dir is None else runs_dir
    steps, baseline_steps = cfg.schedule.steps, cfg.stability.baseline_steps
    train = runset.metric("train")
    by_run = {run_id: sub for run_id, sub in train.groupby("run_id", sort=False)}
    evals = runset.values[runset.values["source"].isin(list(EVAL_SUITES))]
    keys = eval_keys(runset)
    rows = []
    for r in runset.runs.itertuples(index=False):
        spec = RunSpec.parse(r.run_id)
        arms = [
            a for a, prefix in (cfg.study.arms.items() if cfg.study else ()) if arm_cell(prefix, r.run_id)
        ]
        div = first_divergence(Path(runs_dir), r.run_id) if r.status == "diverged" else {}
        row = {
            "run_id": r.run_id,
            "algo": r.algo,
            "model": r.model,
            "base": base_of(cfg, spec),
            "variant": r.variant,
            "granularity": r.granularity,
            "condition": r.condition,
            "seed": r.seed,
            **_noise(cfg, spec, runs_dir),
            "arm": ";".join(arms),
            "status": r.status,
            "reason": r.reason if isinstance(r.reason, str) else "",
            "last_step": r.step,
            "steps_planned": r.steps_planned,
            "div_step": float(div.get("step", r.step)) if r.status == "diverged" else math.nan,
            "div_kind": div.get("kind", "unknown") if r.status == "diverged" else "",
        }
        sub, m = by_run.get(r.run_id), None
        if r.status in USED and sub is not None and not sub.empty:
            m = sub.pivot_table(index="step", columns="metric", values="value", aggfunc="first", dropna=False)
            m = m.sort_index()
            row |= _window_values(m, r.status, steps, baseline_steps) | _value_columns(m)
            row |= _mismatch_columns(m, steps)
        ev = evals[evals["run_id"] == r.run_id] if r.status in USED else evals.iloc[0:0]
        for key in keys:
            row[key] = finite_mean(ev[ev["metric"] == key]["value"])
        if arms:
            row["endpoint"] = study_endpoint(cfg, r.status, m, row)
        if cfg.eval.heldout is not None:
            own = {m: row.get(f"heldout/{m}", math.nan) for m in HELDOUT_METRICS}
            row |= _heldout_columns(own, base_heldout(runs_dir, cfg, spec))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*COLUMNS, *keys])


def endpoints_view(table: pd.DataFrame) -> pd.DataFrame:
    """The markdown/HTML view: the main columns, numbers at three decimals."""
    from fp8rl.report.markdown import fmt

    view = table[[c for c in VIEW_COLUMNS if c in table]].copy()
    for c in view.columns:
        if c not in ("run_id", "base", "status", "div_kind"):
            view[c] = view[c].map(lambda v: fmt(float(v)) if v == v and v is not None else "")
    view["div_step"] = table["div_step"].map(lambda v: "" if v != v else str(int(v)))
    return view
