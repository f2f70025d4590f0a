"""Each study arm's pre-registered endpoint at a glance: the figure `study_endpoint` of a study tier and
the leaderboard SUMMARY.md shows beside it, both read from the arms table (fp8rl.report.planned's
`arms.csv`: per arm the mean over units with its 95 % t-interval).

The figure draws the arms top to bottom in the study's order (`study.arms`, as the config registered
them): each arm's estimate with its interval and each unit's value as a dot (a base's mean over its
seeds with `study.unit: base`, else each run's endpoint), the bf16 control's interval shaded across
the panel. The leaderboard ranks the arms by their estimate, highest first (`rank`, equal estimates
sharing one); a rank says nothing an interval does not (the planned table tests the differences).
Descriptive: no test is drawn from either.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig
from fp8rl.report.figures import STUDY_ENDPOINT
from fp8rl.report.formats import interval, markdown_table, num
from fp8rl.report.paired import base_means
from fp8rl.report.study_gap import control_arm


def unit_values(per_arm: pd.DataFrame, cfg: ExperimentConfig, arm: str) -> list[float]:
    """The values the arm's interval is computed over: each base's mean over its seeds (`unit: base`),
    else each run's endpoint; runs without an endpoint left out."""
    if cfg.study.unit == "base":
        return base_means(per_arm, arm)["endpoint"].tolist()
    values = per_arm.loc[per_arm["arm"] == arm, "endpoint"].astype(float)
    return values[values.map(math.isfinite)].tolist()


def write_study_endpoint_plot(
    arms: pd.DataFrame, per_arm: pd.DataFrame, cfg: ExperimentConfig, out_dir: Path
) -> dict[str, list[Path]]:
    """The figure of `figures.STUDY_ENDPOINT` (module docstring) from the arms table `arms` and the
    per-run endpoints `per_arm` (fp8rl.report.planned.arm_endpoints); returns name -> files."""
    from fp8rl.report.plot_base import PANEL, plt, save_figure

    order = [a for a in cfg.study.arms if a in set(arms["arm"])]
    rows = arms.set_index("arm")
    fig, ax = plt.subplots(figsize=(PANEL[0], max(PANEL[1], 0.9 + 0.32 * len(order))), layout="constrained")
    control = control_arm(cfg)
    shaded = control in rows.index and math.isfinite(float(rows.loc[control, "low"]))
    if shaded:
        ax.axvspan(float(rows.loc[control, "low"]), float(rows.loc[control, "high"]), color="grey", alpha=0.15,
                   lw=0)  # fmt: skip
    for y, arm in enumerate(order):
        r = rows.loc[arm]
        values = unit_values(per_arm, cfg, arm)  # just below the arm's bar, so the bar does not hide them
        ax.scatter(values, [y + 0.22] * len(values), s=10, color="tab:blue", alpha=0.6, lw=0, zorder=2)
        if math.isfinite(float(r["endpoint"])):
            lo, hi = float(r["low"]), float(r["high"])
            if math.isfinite(lo):
                ax.plot([lo, hi], [y, y], color="black", lw=1.2, zorder=3)
            ax.plot([float(r["endpoint"])], [y], marker="D", ms=4, color="black", zorder=4)
    ax.set_yticks(range(len(order)), order, fontsize=7)
    ax.set_ylim(len(order) - 0.5, -0.6)  # the study's first arm on top
    unit = "base means" if cfg.study.unit == "base" else "runs"
    ax.set_xlabel(f"{cfg.study.endpoint.metric}\n(dots: {unit}; ◆ and bar: mean, 95 % t)", fontsize=8)
    title = "the pre-registered endpoint per arm"
    ax.set_title(title + (f"\n(shaded: {control}'s 95 % interval)" if shaded else ""), fontsize=9)
    (name,) = STUDY_ENDPOINT
    out = {name: save_figure(fig, out_dir, name)}
    plt.close("all")
    return out


def leaderboard(arms: pd.DataFrame, survival: pd.DataFrame | None = None) -> str:
    """The arms ranked by their endpoint (highest first, equal estimates sharing a rank; an arm without
    one last, unranked) as a markdown table: the estimate with its interval, the bases (with
    `study.unit: base`) and runs behind it, and the runs diverged with their median step to divergence
    where `survival` (study_survival.csv) has them."""
    ranked = arms.assign(_rank=arms["endpoint"].astype(float).rank(ascending=False, method="min"))
    ranked = ranked.sort_values("_rank", kind="stable", na_position="last")
    surv = survival.set_index("arm") if survival is not None and "arm" in survival else None
    by_base = "bases" in arms  # the unit is the base: the arms table counts them
    rows = []
    for r in ranked.to_dict("records"):
        scored = math.isfinite(float(r["endpoint"]))
        diverged = f"{int(r['diverged'])} of {int(r['runs'])}"
        median = (
            surv.loc[r["arm"]].get("median_div_step") if surv is not None and r["arm"] in surv.index else None
        )
        if pd.notna(median):
            diverged += f" (median step {num(float(median), 0)})"
        rows.append([
            str(int(r["_rank"])) if scored else "–", f"`{r['arm']}`",
            interval(float(r["endpoint"]), float(r["low"]), float(r["high"]), 3) if scored else "n/a",
            *([str(int(r["bases"]))] if by_base else []), f"{int(r['n'])} of {int(r['runs'])}", diverged,
        ])  # fmt: skip
    header = ["rank", "arm", "endpoint [95 % CI]", *(["bases"] if by_base else []), "runs with an endpoint"]
    return markdown_table([*header, "diverged"], rows)
