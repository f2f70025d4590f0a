"""Each study arm's reward gap to the bf16 control, step by step, paired the way the study's test pairs
it: the table behind the figure `study_reward_gap` of a pre-registered study (the clipping
tier).

The per-run reward curves of a study whose seeds start from several bases differ mostly by base (a
min-max band over runs spans the bases' spread, not the arms' difference). Here, per step and arm
(runs that trained only, `reward/mean` as logged):

- `study.unit: base`: each base's mean over the arm's seeds minus the control's mean on the same base;
  `gap` is the mean of those differences over the bases both arms have, [`low`, `high`] its 95 %
  t-interval (df = bases − 1): the planned table's paired test, at every step instead of on the
  final-window endpoint;
- the run as the unit: the difference of the two arms' means over runs with Welch's interval.

`units`: the bases paired, or the runs of the smaller of the two arms.

The control is the arm whose cell is a bf16 run; without one there is nothing to draw. Descriptive: no
test is drawn from the curves.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec
from fp8rl.report.comparison import USED_STATUSES
from fp8rl.report.figures import STUDY_GAP
from fp8rl.report.load import RunSet
from fp8rl.report.planned import arm_runs
from fp8rl.stats.intervals import t_interval
from fp8rl.stats.welch import welch_interval
from fp8rl.vocabulary import REWARD_MEAN

COLUMNS = ["arm", "step", "gap", "low", "high", "units"]


def control_arm(cfg: ExperimentConfig) -> str | None:
    """The study arm whose runs are bf16 (the first such), or None."""
    for arm, cell in cfg.study.arms.items():
        if RunSpec.parse(f"{cell.strip('/')}/seed0").variant == "bf16":
            return arm
    return None


def _arm_rewards(runset: RunSet, cfg: ExperimentConfig) -> pd.DataFrame:
    """`reward/mean` per (arm, run, step) of the runs that trained, with the run's `unit` (its base with
    `unit: base`, else its run id)."""
    data = runset.metric("train", REWARD_MEAN)
    data = arm_runs(data[data["status"].isin(USED_STATUSES)], cfg)
    if cfg.study.unit == "base":  # one base per run, looked up once
        runs = data[["run_id", "model", "seed"]].drop_duplicates("run_id")
        base = {r: cfg.base_of(m, int(s)) for r, m, s in runs.itertuples(index=False)}
        unit = data["run_id"].map(base)
    else:
        unit = data["run_id"]
    return data[["run_id", "step", "value", "arm"]].assign(unit=unit)


def reward_gaps(runset: RunSet, cfg: ExperimentConfig) -> pd.DataFrame:
    """One row per (non-control arm, step) with a value in both arms (module docstring)."""
    control = control_arm(cfg)
    rewards = _arm_rewards(runset, cfg)
    if control is None or control not in set(rewards["arm"]):
        return pd.DataFrame(columns=COLUMNS)
    # (step, unit) x arm: each unit's mean over its runs; with the run as the unit, one arm per row
    wide = rewards.groupby(["step", "unit", "arm"])["value"].mean().unstack("arm")
    paired = cfg.study.unit == "base"
    rows = []
    for arm in (a for a in cfg.study.arms if a != control and a in wide):
        for step, g in wide.groupby(level="step"):
            # a base without one of the two arms gives NaN: left out of the pairs
            ci = t_interval(g[arm] - g[control]) if paired else welch_interval(g[arm], g[control])
            if ci.n:
                rows.append({"arm": arm, "step": int(step), "gap": ci.estimate, "low": ci.low,
                             "high": ci.high, "units": ci.n})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def write_study_gap_plot(gaps: pd.DataFrame, cfg: ExperimentConfig, out_dir: Path) -> dict[str, list[Path]]:
    """The figure of `figures.STUDY_GAP`: per non-control arm its `gap` line and interval band (`gaps`
    from `reward_gaps`), each arm in its colour of the survival figure, the zero line and the endpoint's
    window shaded; returns name -> files."""
    from fp8rl.report.plot_base import PANEL, distinct_colors, plt, save_figure

    arms = list(cfg.study.arms)
    colors = dict(zip(arms, distinct_colors(max(len(arms), 1)), strict=False))
    fig, ax = plt.subplots(figsize=PANEL, layout="constrained")
    if gaps.empty:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    paired = cfg.study.unit == "base"
    for arm, g in gaps.groupby("arm", sort=False):
        n = int(g["units"].max())
        ax.plot(
            g["step"],
            g["gap"],
            color=colors[arm],
            lw=1.2,
            label=f"{arm} ({n} {'bases' if paired else 'runs'})",
        )
        ax.fill_between(g["step"], g["low"], g["high"], color=colors[arm], alpha=0.15, lw=0)
    ax.axhline(0.0, color="black", lw=0.8)
    start = cfg.study.endpoint.from_frac * cfg.schedule.steps
    ax.axvspan(start, cfg.schedule.steps, color="grey", alpha=0.12, lw=0, label="endpoint window")
    how = "paired within base\n(band: 95 % t over bases)" if paired else "\n(band: Welch 95 % over runs)"
    ax.set(xlabel="step", ylabel=f"{REWARD_MEAN} − {control_arm(cfg)}")
    ax.set_title(f"reward gap to the control, {how}", fontsize=9)
    ax.legend(fontsize=7)
    (name,) = STUDY_GAP
    out = {name: save_figure(fig, out_dir, name)}
    plt.close("all")
    return out
