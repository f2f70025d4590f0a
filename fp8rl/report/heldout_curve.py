"""The held-out bf16 endpoint over training, per arm: table `heldout_curve` and the figure of that name.

In a tier that keeps checkpoints (`schedule.keep_every`) and scores the held-out endpoint
(`eval.heldout`), each run has three kinds of held-out score, all with the bf16 sampler on the same
prompts and draws: its base's (`base/{base}/eval/heldout.json`: step 0), each kept checkpoint's
(`eval/heldout_history.json`, fp8rl.evaluate.suites.heldout_history) and its final checkpoint's
(`eval/heldout.json`, at the last step it trained). Per run they form one curve; per arm and step the
table averages them over the units: within base first with `study.unit: base`, else over runs. An arm is
a study arm (`study.arms`), or, without a study, a variant (with its condition in a matrix that has
them). The metric is the study's endpoint where that is a held-out one, else `sampled_reward`.

A run that stopped before the end (a diverged run under `on_divergence: stop`) has no score past its
stop, so a later step's mean is over fewer units (`units` says how many); a failed or missing run, or a
history that scored another checkpoint than the run's (retrained since), has none. Descriptive: no test
is drawn from it; the planned contrasts test the final checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fp8rl.checkpoint_files import scored_another_checkpoint
from fp8rl.config import ExperimentConfig
from fp8rl.report.endpoints import read_json_object
from fp8rl.report.figures import HELDOUT_CURVE
from fp8rl.report.methods import value_range
from fp8rl.run_files import RunDir
from fp8rl.stats.intervals import sample_sd, t_interval

if TYPE_CHECKING:
    from fp8rl.report.pipeline import ReportData, Section

COLUMNS = ["arm", "step", "units", "mean", "low", "high", "sd"]
USED = ("ok", "diverged")


def curve_metric(cfg: ExperimentConfig) -> str:
    """The held-out metric the curves follow: the study's endpoint where it is a held-out one."""
    if cfg.study is not None and cfg.study.endpoint.metric.startswith("heldout/"):
        return cfg.study.endpoint.metric.removeprefix("heldout/")
    return "sampled_reward"


def _arm_of(endpoints: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """endpoints.csv's frame with each run's arm in `arm` (a run in two study arms has a row in each)."""
    if cfg.study is not None:
        from fp8rl.report.planned import arm_runs

        return arm_runs(endpoints.drop(columns=["arm"], errors="ignore"), cfg)
    cond = endpoints["condition"] if "condition" in endpoints else pd.Series("none", index=endpoints.index)
    labels = [
        v if c in (None, "none") or c != c else f"{v} {c}"
        for v, c in zip(endpoints["variant"], cond, strict=True)
    ]
    return endpoints.assign(arm=labels)


def _history(run: RunDir, metric: str, problems: list[str]) -> dict[int, float]:
    """step -> score of the run's kept checkpoints; empty (and a problem) for a history that scored
    another final checkpoint than the run's, or is unreadable."""
    path = run.eval_file("heldout_history")
    if not path.is_file():
        problems.append(f"{path}: missing; the run has no held-out curve past its base")
        return {}
    try:
        doc = read_json_object(path)
        if scored_another_checkpoint(doc, run.checkpoint):
            problems.append(f"{path}: scored another checkpoint than the run's (retrained since?); ignored")
            return {}
        out = {}
        for entry in doc["history"]:
            values = [
                r["value"] for r in entry["results"] if r["task"] == "heldout" and r["metric"] == metric
            ]
            if values and math.isfinite(float(values[0])):
                out[int(entry["step"])] = float(values[0])
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problems.append(f"{path}: unreadable ({exc}); ignored")
        return {}


def curve_points(
    endpoints: pd.DataFrame, cfg: ExperimentConfig, runs_dir: Path
) -> tuple[pd.DataFrame, list[str]]:
    """One row per run, arm and step with a held-out score: `arm`, `run_id`, `base`, `step`, `value`;
    and the problems met reading the histories."""
    metric, problems, rows = curve_metric(cfg), [], []
    for r in _arm_of(endpoints, cfg).to_dict("records"):
        if r["status"] not in USED:
            continue
        points = {0: r.get(f"base_heldout_{metric}", math.nan)}
        points |= _history(RunDir.of(runs_dir, r["run_id"]), metric, problems)
        final, step = r.get(f"heldout/{metric}", math.nan), r.get("last_step", math.nan)
        if pd.notna(step) and pd.notna(final):
            points.setdefault(int(step), float(final))
        rows += [{"arm": r["arm"], "run_id": r["run_id"], "base": r.get("base"), "step": s, "value": float(v)}
                 for s, v in sorted(points.items()) if pd.notna(v) and math.isfinite(float(v))]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["arm", "run_id", "base", "step", "value"])
    return frame, sorted(set(problems))


def curve_table(points: pd.DataFrame, cfg: ExperimentConfig) -> pd.DataFrame:
    """Per arm (in the study's order, else first seen) and step: the units with a score there, their
    mean with its 95 % t-interval, cut to [0, 1] (a held-out score is a proportion), and SD (units: base
    means with `study.unit: base`, else runs)."""
    metric = curve_metric(cfg)
    by_base = cfg.study is not None and cfg.study.unit == "base"
    order = list(cfg.study.arms) if cfg.study is not None else list(dict.fromkeys(points["arm"]))
    rows = []
    for arm in order:
        sub = points[points["arm"] == arm]
        for step, at in sub.groupby("step", sort=True):
            units = at.groupby("base", sort=False)["value"].mean() if by_base else at["value"]
            ci = t_interval(units, bounds=value_range(f"heldout/{metric}"))
            rows.append({"arm": arm, "step": int(step), "units": ci.n, "mean": ci.estimate, "low": ci.low,
                         "high": ci.high, "sd": sample_sd(units)})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def curve_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the Markdown shows it: per arm and step, the units and the mean with its interval."""
    from fp8rl.report.formats import interval

    return pd.DataFrame({
        "arm": table["arm"], "step": table["step"].astype(str), "units": table["units"].astype(str),
        "mean [95 % CI]": [interval(m, lo, hi, 3) for m, lo, hi in zip(table["mean"], table["low"], table["high"], strict=True)],
    })  # fmt: skip


def notes(cfg: ExperimentConfig, problems: list[str]) -> list[str]:
    """The table's notes: what it holds, and every history the report could not use."""
    unit = (
        "base means (each base's runs averaged first)"
        if cfg.study is not None and cfg.study.unit == "base"
        else "runs"
    )
    return [
        f"`heldout/{curve_metric(cfg)}` (bf16 sampler) at each run's base (step 0), every checkpoint kept every "
        f"{cfg.schedule.keep_every} steps and the final one; `mean` [`low`, `high`]: the mean over {unit} "
        "with its 95 % t-interval; `units`: how many have a score at that step (a run that stopped early has "
        "none past its stop). Descriptive: the planned contrasts test the final checkpoint.",
        *problems,
    ]


def write_heldout_curve_plot(
    table: pd.DataFrame, cfg: ExperimentConfig, out_dir: Path
) -> dict[str, list[Path]]:
    """The figure of `figures.HELDOUT_CURVE`: each arm's mean per step with its interval as a band."""
    from fp8rl.report.plot_base import PANEL, distinct_colors, plt, save_figure

    arms = list(dict.fromkeys(table["arm"]))
    fig, ax = plt.subplots(figsize=(PANEL[0] * 1.3, PANEL[1] * 1.2), layout="constrained")
    for arm, color in zip(arms, distinct_colors(len(arms)), strict=True):
        sub = table[table["arm"] == arm]
        ax.plot(sub["step"], sub["mean"], marker="o", ms=3, lw=1.2, color=color, label=arm)
        band = sub[np.isfinite(sub["low"].to_numpy(dtype=float))]
        ax.fill_between(band["step"], band["low"], band["high"], color=color, alpha=0.12, lw=0)
    ax.set_xlabel("step (0: the base)", fontsize=8)
    ax.set_ylabel(f"heldout/{curve_metric(cfg)} (bf16 sampler)", fontsize=8)
    ax.tick_params(labelsize=7)
    if arms:
        ax.legend(fontsize=6, ncol=2 if len(arms) > 5 else 1)
    (name,) = HELDOUT_CURVE
    out = {name: save_figure(fig, out_dir, name)}
    plt.close("all")
    return out


def heldout_curve_section(data: ReportData) -> Section:
    """The report's section (fp8rl.report.pipeline): the table and its figure, where the tier scores its
    kept checkpoints (`ReportPaths.history`)."""
    if not data.paths.history:
        return [], []
    from fp8rl.report.endpoints import FLOAT_FORMAT
    from fp8rl.report.figures import captioned
    from fp8rl.report.writer import ReportTable

    cfg = data.cfg
    points, problems = curve_points(data.endpoints, cfg, data.runs_dir)
    table = curve_table(points, cfg)
    view = curve_view(table)
    tables = [ReportTable("heldout_curve", "Held-out endpoint over training", "held-out curve", view,
                          notes(cfg, problems), table, float_format=FLOAT_FORMAT)]  # fmt: skip
    figures = write_heldout_curve_plot(table, cfg, data.paths.plots_dir)
    return tables, captioned(figures)
