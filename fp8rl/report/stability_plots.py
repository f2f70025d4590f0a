"""The stability report's figures (fp8rl.report.stability describes them), and a study tier's survival
figure per arm (fp8rl.report.study_survival), PNG and SVG each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fp8rl.report.figures import STABILITY, STUDY_SURVIVAL
from fp8rl.report.load import RunSet
from fp8rl.report.plot_base import distinct_colors, figure_grid, plt, save_figure
from fp8rl.report.stability import CURVES, GROUP, _group_times, breaking_dose_table, kaplan_meier


def _label(key: tuple, multi_panel: bool, axis: str = "noise_scale") -> str:
    """A group's legend entry: its variant with its dose (`x4`) or target KL (`KL 0.01`; none for bf16)."""
    algo, model, variant, gran, noise = key
    head = f"{algo}/{model} " if multi_panel else ""
    if axis == "noise_scale":
        return f"{head}{variant} x{noise:g}"
    return f"{head}{variant}" + (f" KL {noise:g}" if noise else "")


def _survival(per_run: pd.DataFrame, out_dir: Path, axis: str) -> list[Path]:
    fig, axes = figure_grid(1)
    ax = axes[0, 0]
    multi = per_run[["algo", "model"]].drop_duplicates().shape[0] > 1
    ax.set_prop_cycle(color=distinct_colors(max(per_run.groupby(GROUP).ngroups, 1)))
    for key, g in per_run.groupby(GROUP, sort=False):
        t, s = kaplan_meier(*_group_times(g))
        end = float(g["last_step"].max())
        ax.step([*t, end], [*s, s[-1]], where="post", label=f"{_label(key, multi, axis)} (n={len(g)})")
    ax.set(xlabel="step", ylabel="fraction not diverged", ylim=(-0.03, 1.03))
    ax.legend(fontsize=6)
    return save_figure(fig, out_dir, "survival")


def _curves(runset: RunSet, per_run: pd.DataFrame, out_dir: Path, axis: str) -> list[Path]:
    fig, axes = figure_grid(len(CURVES), 2)
    train = runset.metric("train")
    dose_of = dict(zip(per_run["run_id"], per_run["noise"], strict=True))
    train = train[train["run_id"].isin(dose_of)].assign(noise=lambda v: v["run_id"].map(dose_of))
    multi = per_run[["algo", "model"]].drop_duplicates().shape[0] > 1
    swept = per_run.groupby(GROUP[:4])["noise"].transform("nunique") > 1
    # top row: every variant at dose 1, or bf16 and every fp8 variant at the lowest target KL
    first = 1.0 if axis == "noise_scale" else per_run.loc[per_run["noise"] > 0, "noise"].min()
    top = (train["noise"] == first) | ((axis != "noise_scale") & (train["noise"] == 0))
    rows = (top, train["variant"].isin(set(per_run.loc[swept, "variant"])))
    where = ("dose 1", "dose sweep") if axis == "noise_scale" else (f"KL {first:g}", "KL sweep")
    for row, keep in enumerate(rows):
        for col, (metric, title) in enumerate(CURVES):
            ax = axes[row, col]
            data = train[keep & (train["metric"] == metric)]
            ax.set_prop_cycle(color=distinct_colors(max(data.groupby(GROUP).ngroups, 1)))
            for key, g in data.groupby(GROUP, sort=False):
                by_step = g.groupby("step")["value"]
                mean = by_step.mean()
                line = ax.plot(mean.index, mean.values, label=_label(key, multi, axis), lw=1)[0]
                low, high = by_step.quantile(0.25), by_step.quantile(0.75)  # as plots._curves
                ax.fill_between(mean.index, low, high, color=line.get_color(), alpha=0.15)
            ax.set(xlabel="step", title=f"{title} ({where[row]})")
            if metric == "entropy" and len(data) and (data["value"] > 0).all():
                ax.set_yscale("log")
            if len(data):
                ax.legend(fontsize=6)
    return save_figure(fig, out_dir, "stability_curves")


def _breaking(table: pd.DataFrame, out_dir: Path, axis: str) -> list[Path]:
    fig, axes = figure_grid(1)
    ax = axes[0, 0]
    fits = breaking_dose_table(table).set_index(GROUP[:4]) if not table.empty else None
    for i, (key, g) in enumerate(table.groupby(GROUP[:4], sort=False)):
        if g["noise"].nunique() < 2:
            continue
        g = g.sort_values("noise")
        err = np.vstack([g["diverged_frac"] - g["diverged_low"], g["diverged_high"] - g["diverged_frac"]])
        line = ax.errorbar(
            g["noise"], g["diverged_frac"], yerr=err, marker="o", capsize=3, label="/".join(key)
        )
        fit = fits.loc[key]
        if not (np.isnan(fit["ed50_low"]) or np.isnan(fit["ed50_high"])):  # open ends: past the doses run
            doses = g["noise"].to_numpy(float)
            lo, hi = max(fit["ed50_low"], doses.min() / 2), min(fit["ed50_high"], doses.max() * 2)
            y = 0.5 + 0.02 * i
            ax.plot([lo, hi], [y, y], color=line[0].get_color(), lw=3, alpha=0.5)
            if np.isfinite(fit["ed50"]):
                ax.plot([fit["ed50"]], [y], "o", color=line[0].get_color(), ms=4)
    ax.axhline(0.5, ls="--", color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    xlabel = (
        "fp8.noise_scale dose"
        if axis == "noise_scale"
        else "fp8.target_kl (per-token KL, trainer vs rollout)"
    )
    ax.set(xlabel=xlabel, ylabel="fraction diverged (Clopper-Pearson 95%)", ylim=(-0.03, 1.03))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "breaking_dose")


def write_stability_plots(
    runset: RunSet, per_run: pd.DataFrame, table: pd.DataFrame, out_dir: Path, axis: str = "noise_scale"
) -> dict[str, list[Path]]:
    """Write every figure of `figures.STABILITY` (empty axes when no run trained) along the noise `axis`
    (fp8rl.report.paths `noise_axis`); returns name -> files."""
    builders = {
        "survival": lambda: _survival(per_run, out_dir, axis),
        "stability_curves": lambda: _curves(runset, per_run, out_dir, axis),
        "breaking_dose": lambda: _breaking(table, out_dir, axis),
    }
    out = {name: builders[name]() for name in STABILITY}
    plt.close("all")
    return out


def write_study_survival_plot(per_arm: pd.DataFrame, arms: list[str], out_dir: Path) -> dict[str, list[Path]]:
    """The figure of `figures.STUDY_SURVIVAL`: one Kaplan-Meier curve per arm of `arms` that has trained
    runs (`per_arm`: planned.arm_runs), labelled with the arm's name and its runs; returns name ->
    files."""
    fig, axes = figure_grid(1)
    ax = axes[0, 0]
    n = max(len(arms), 1)
    # arms that never diverge share the line at 1: each has its own dash and a width that narrows from
    # the first arm to the last, so every one stays visible where they overlap
    styles = ["-", "--", "-.", ":"] * (n // 4 + 1)
    ax.set_prop_cycle(
        color=distinct_colors(n),
        linestyle=styles[:n],
        linewidth=[3.5 - 2.5 * i / max(n - 1, 1) for i in range(n)],
    )
    for arm in arms:
        g = per_arm[per_arm["arm"] == arm]
        if g.empty:
            ax.plot([], [])  # keeps each arm's colour when an arm has no run yet
            continue
        t, s = kaplan_meier(*_group_times(g))
        end = float(g["last_step"].max())
        ax.step(
            [*t, end],
            [*s, s[-1]],
            where="post",
            label=f"{arm} ({int(g['diverged'].sum())}/{len(g)} diverged)",
        )
    ax.set(xlabel="step", ylabel="fraction not diverged", ylim=(-0.03, 1.1))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    (name,) = STUDY_SURVIVAL
    out = {name: save_figure(fig, out_dir, name)}
    plt.close("all")
    return out
