"""The report's figures (matplotlib, Agg backend), each written as PNG and SVG.

One panel per (algo, model); one series per (variant, granularity, condition), labelled
`variant/granularity/condition` (`bf16` alone), or in a study tier by the arm's name, as the tables name
it (`study.arms`: `arm_names`). Curves use the seeds whose run is `ok` or `diverged`:

- `entropy`: entropy vs step, mean over seeds with a band over the middle half of the seeds (25th to
  75th percentile: a min–max band over many seeds and bases covers every series alike); an `x` marks
  where a diverged run stopped.
- `clip_low_neg`: `clip/low_neg` vs step, same layout.
- `ratio_tails`: histograms over all steps and seeds of the per-step PPO-ratio tails `ratio/p01`
  (top row) and `ratio/p99` (bottom row), FP8 variants against bf16. The trainer logs ratio quantiles
  per step, not per-token ratios, so this is the distribution of the tails, not of single tokens; the
  per-token FP8-vs-BF16-shadow disagreement is `phantom/low_neg` in the comparison table.
- `ratio_hist`: per-token PPO-ratio distributions of the shadow tokens, FP8 (solid) against the
  BF16 shadow pass of the same tokens (dashed), summed over seeds, for all tokens (top row) and A<0
  tokens (bottom row), with the fixed clip bounds; from each FP8 run's `ratio_hist.json`.
- `eval_scores`: per eval score, bars of the seed mean with the 95 % t-interval (no bar for n = 1), cut to
  [0, 1] for a proportion (fp8rl.report.methods.is_proportion).
- `throughput`: tokens/s per phase per variant, grouped bars, labelled emulated or hardware.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from fp8rl.report.comparison import USED_STATUSES
from fp8rl.report.figures import CORE
from fp8rl.report.load import RunSet
from fp8rl.report.methods import is_proportion
from fp8rl.report.plot_base import (
    PANEL,
    Names,
    distinct_colors,
    figure_grid,
    no_data,
    place_legends,
    plt,
    save_figure,
    series_groups,
    series_label,
)
from fp8rl.vocabulary import (
    ACC_MEAN,
    CALIB_HIGH,
    CALIB_LOW,
    CLIP_LOW_NEG,
    EVAL_SUITES,
    MISMATCH_KL_K3,
    REFERENCE_VARIANT,
    RESP_LEN_MEAN,
    REWARD_MEAN,
    VARIANT_SPECS,
)

EVAL_SOURCES = EVAL_SUITES
RATIO_TICKS = (0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0)


def _panels(runset: RunSet) -> list[tuple[str, str]]:
    return list(dict.fromkeys(zip(runset.runs["algo"], runset.runs["model"], strict=False)))


def step_curves(
    runset: RunSet,
    metrics: tuple[str, ...],
    title: str,
    bounds: dict[str, dict[str, tuple[float, str]]] | None = None,
    names: Names | None = None,
) -> plt.Figure:
    """One row per metric, one column per (algo, model); per series the mean over seeds with a band
    over their middle half. `bounds`: algo -> metric -> (y, label) of a fixed reference line to draw."""
    panels = _panels(runset)
    colors = _series_colors(runset)
    fig, axes = figure_grid(len(panels), len(metrics))
    for row, metric in enumerate(metrics):
        data = runset.metric("train", metric)
        data = data[data["status"].isin(USED_STATUSES)]
        for ax, (algo, model) in zip(axes[row], panels, strict=False):
            sub = data[(data["algo"] == algo) & (data["model"] == model)]
            ax.set_title(f"{algo} / {model}: {metric}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel(metric)
            if sub.empty:
                no_data(ax)
                continue
            _curves(ax, sub, colors, names)
            if (line := (bounds or {}).get(algo, {}).get(metric)) is not None:
                ax.axhline(line[0], color="black", lw=1, ls="--", label=line[1])
    place_legends(fig, axes, len(colors))
    # the note on two lines: one line is wider than a one-panel figure, and its ends were cut off
    fig.suptitle(
        f"{title}\n(mean over seeds, band = middle half of the seeds;\nx = a diverged run's last step)",
        fontsize=10,
    )
    return fig


def _series_colors(runset: RunSet) -> dict[tuple, str]:
    """One color per series (variant, granularity, condition) across every panel and figure, each
    series its own."""
    series = list(dict.fromkeys(series_groups(runset.runs).groups))
    return dict(zip(series, distinct_colors(len(series)), strict=True))


def _curves(ax: plt.Axes, sub: pd.DataFrame, colors: dict[tuple, str], names: Names | None = None) -> None:
    for key, s in series_groups(sub):
        by_step = s[np.isfinite(s["value"])].groupby("step")["value"]
        mean = by_step.mean()
        (line,) = ax.plot(mean.index, mean.values, label=series_label(*key, names), color=colors.get(key))
        low, high = by_step.quantile(0.25), by_step.quantile(0.75)
        ax.fill_between(mean.index, low, high, color=line.get_color(), alpha=0.2)
        for _, run in s[s["status"] == "diverged"].groupby("run_id"):
            last = run[np.isfinite(run["value"])].sort_values("step").tail(1)
            ax.plot(last["step"], last["value"], "x", color=line.get_color(), markersize=9, mew=2)


def ratio_tails(runset: RunSet, names: Names | None = None) -> plt.Figure:
    panels = _panels(runset)
    fig, axes = figure_grid(len(panels), 2)
    for row, metric in enumerate(("ratio/p01", "ratio/p99")):
        data = runset.metric("train", metric)
        data = data[data["status"].isin(USED_STATUSES) & np.isfinite(data["value"])]
        for ax, (algo, model) in zip(axes[row], panels, strict=False):
            sub = data[(data["algo"] == algo) & (data["model"] == model)]
            ax.set_title(f"{algo} / {model}: per-step {metric}")
            ax.set_xlabel("PPO ratio π_θ/π_old")
            ax.set_ylabel("steps")
            if sub.empty:
                no_data(ax)
                continue
            bins = np.histogram_bin_edges(sub["value"], bins=30)
            for key, s in series_groups(sub):
                ax.hist(s["value"], bins=bins, histtype="step", lw=1.5, label=series_label(*key, names))
    place_legends(fig, axes, series_groups(runset.runs).ngroups, fontsize=7)
    fig.suptitle("PPO-ratio tails per step: FP8 variants vs bf16")
    return fig


def ratio_hist(
    runset: RunSet, clip_bounds: dict[str, tuple[float, float]], names: Names | None = None
) -> plt.Figure:
    """FP8 vs BF16-shadow ratio histograms (module docstring); `clip_bounds`: algo -> (1-ε_low, 1+ε_high)."""
    panels = _panels(runset)
    fig, axes = figure_grid(len(panels), 2)
    used = runset.runs[runset.runs["status"].isin(USED_STATUSES)]
    for row, pop in enumerate(("all", "neg")):
        for ax, (algo, model) in zip(axes[row], panels, strict=False):
            ax.set_title(f"{algo} / {model}: {'all' if pop == 'all' else 'A<0'} shadow tokens")
            ax.set_xlabel("PPO ratio π_θ/π_old")
            ax.set_ylabel("fraction of tokens")
            runs = used[(used["algo"] == algo) & (used["model"] == model)]
            drawn = False
            for i, (key, group) in enumerate(series_groups(runs)):
                hists = [runset.ratio_hists[r] for r in group["run_id"] if r in runset.ratio_hists]
                if not hists:
                    continue
                edges = np.asarray(hists[0]["edges"])
                for kind, style in (("fp8", "-"), ("bf16_shadow", "--")):
                    counts = np.sum([h["counts"][f"{kind}/{pop}"] for h in hists], axis=0)[1:-1]
                    if counts.sum() == 0:
                        continue
                    label = f"{series_label(*key, names)} {'FP8' if kind == 'fp8' else 'BF16 shadow'}"
                    ax.stairs(counts / counts.sum(), edges, ls=style, color=f"C{i}", label=label)
                    drawn = True
            if not drawn:
                no_data(ax)
                continue
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(RATIO_TICKS, [f"{t:g}" for t in RATIO_TICKS])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            for bound in clip_bounds.get(algo, ()):
                ax.axvline(bound, color="grey", lw=0.8, ls=":")
    place_legends(fig, axes, 2 * series_groups(used).ngroups)
    fig.suptitle(
        "Per-token PPO ratio: FP8 vs BF16 shadow\nof the same tokens (dotted: clip bounds)", fontsize=10
    )
    return fig


EVAL_COLS = 3  # eval panels per row
SEED_POINTS_MAX_N = 10  # draw each seed's score when a bar has at most this many


def _seed_scores(runset: RunSet, key: str) -> pd.DataFrame:
    v = runset.values[runset.values["source"].isin(EVAL_SOURCES) & (runset.values["metric"] == key)]
    return v[v["status"].isin(USED_STATUSES) & np.isfinite(v["value"])]


def eval_bars(
    comparison: pd.DataFrame, keys: list[str], runset: RunSet | None = None, names: Names | None = None
) -> plt.Figure:
    """Horizontal bars (one row per algo/model/series, bf16 once) of the seed mean, its 95 % t-interval
    cut to [0, 1] when the score is a proportion (stats.is_proportion), and each seed's score as a dot."""
    rows = comparison[comparison["variant"] != REFERENCE_VARIANT]
    # bf16 once per algo/model (it repeats in every granularity group)
    ref = comparison[comparison["variant"] == REFERENCE_VARIANT].drop_duplicates(["algo", "model"])
    rows = pd.concat([ref, rows]).sort_index(kind="stable")
    n_cols = min(EVAL_COLS, max(len(keys), 1))
    n_rows = max(1, -(-len(keys) // n_cols))
    height = max(PANEL[1], 0.9 + 0.22 * len(rows))
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(PANEL[0] * n_cols, height * n_rows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(keys) :]:
        ax.set_axis_off()
    if not keys:
        axes[0][0].set_axis_on()
        no_data(axes[0][0])
        return fig
    grans = [
        "none" if v == REFERENCE_VARIANT else g
        for v, g in zip(rows["variant"], rows["granularity"], strict=False)
    ]
    # bf16 rows carry their comparison group's condition; the bf16 runs themselves have condition `none`
    conds = rows["condition"].tolist() if "condition" in rows else [None] * len(rows)
    conds = [
        c if c is None or v != REFERENCE_VARIANT else "none"
        for v, c in zip(rows["variant"], conds, strict=False)
    ]
    series = list(zip(rows["algo"], rows["model"], rows["variant"], grans, conds, strict=False))
    labels = [f"{a}/{m} {series_label(v, g, c, names)}" for a, m, v, g, c in series]
    y = np.arange(len(rows))[::-1]  # first row on top
    colors = ["grey" if v == REFERENCE_VARIANT else "C0" for v in rows["variant"]]
    for ax, key in zip(axes.flat, keys, strict=False):
        mean = rows[f"{key} mean"].to_numpy(float)
        low, high = rows[f"{key} ci_low"].to_numpy(float), rows[f"{key} ci_high"].to_numpy(float)
        seeds = _seed_scores(runset, key) if runset is not None else pd.DataFrame(columns=["value"])
        proportion = is_proportion(key)
        if proportion:  # the table's intervals are cut already (stats.value_range); a plot may get others
            low, high = np.clip(low, 0, 1), np.clip(high, 0, 1)
        # NaN (n = 1): no error bar; never negative (a mean outside its cut interval would crash matplotlib)
        err = np.clip(np.vstack([mean - low, high - mean]), 0, None)
        ax.barh(y, np.nan_to_num(mean), xerr=err, capsize=3, color=colors, alpha=0.8, height=0.7)
        for yi, (a, m, v, g, c) in zip(y, series, strict=False):
            same = (
                (seeds["algo"] == a)
                & (seeds["model"] == m)
                & (seeds["variant"] == v)
                & (seeds["granularity"] == g)
            )
            if c is not None and "condition" in seeds:
                same &= seeds["condition"] == c
            pts = seeds[same]["value"]
            if 0 < len(pts) <= SEED_POINTS_MAX_N:
                ax.plot(pts, np.full(len(pts), yi), "o", color="black", ms=3, zorder=3)
        ax.set_yticks(y, labels, fontsize=7)
        if proportion:
            ax.set_xlim(0, 1)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("score")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        "Eval scores: bar = mean over seeds, line = 95% t-interval (cut to [0, 1]; none when n = 1), dot = a seed"
    )
    return fig


def throughput_bars(table: pd.DataFrame, names: Names | None = None) -> plt.Figure:
    """Tokens/s per phase per series. The `calib` phase of a variant that does not calibrate is its
    diagnostic BF16 shadow pass, drawn hatched and named so. One legend, under the panels."""
    phases = [c for c in table.columns if c.endswith(" tok/s")]
    panels = list(dict.fromkeys(zip(table["algo"], table["model"], strict=False)))
    fig, axes = figure_grid(len(panels))
    handles: dict[str, object] = {}
    for ax, (algo, model) in zip(axes[0], panels, strict=False):
        sub = table[(table["algo"] == algo) & (table["model"] == model)]
        ax.set_title(f"{algo} / {model}")
        ax.set_ylabel("tokens/s")
        if sub[phases].isna().all().all():
            no_data(ax)
            continue
        x = np.arange(len(sub))
        width = 0.8 / max(len(phases), 1)
        calibrates = np.array([VARIANT_SPECS[v].calib for v in sub["variant"]])
        for i, phase in enumerate(phases):
            name = phase.removesuffix(" tok/s")
            values = sub[phase].fillna(0).to_numpy(float)
            if name != "calib":
                handles[name] = ax.bar(x + i * width, values, width, color=f"C{i}")
                continue
            for mask, label, hatch in ((calibrates, "calib (calibrated clipping)", None),
                                       (~calibrates, "shadow pass (diagnostics, no calibration)", "//")):  # fmt: skip
                if (values[mask] > 0).any():
                    handles[label] = ax.bar(
                        x[mask] + i * width,
                        values[mask],
                        width,
                        color=f"C{i}",
                        hatch=hatch,
                        edgecolor="white",
                    )
        conds = sub["condition"] if "condition" in sub else [None] * len(sub)
        ticks = [
            f"{series_label(v, g, c, names)}\n({e or 'n/a'})"
            for v, g, c, e in zip(sub["variant"], sub["granularity"], conds, sub["execution"], strict=False)
        ]
        ax.set_xticks(x + 0.4 - width / 2, ticks, rotation=30, ha="right", fontsize=7)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=3, fontsize=7)
    # the note on its own line: one line is wider than a one-panel figure, and its ends were cut off
    fig.suptitle("Throughput per phase\n(tokens/s, mean over seeds; emulated = no FP8 hardware)", fontsize=10)
    return fig


def write_plots(
    runset: RunSet,
    comparison: pd.DataFrame,
    keys: list[str],
    throughput: pd.DataFrame,
    out_dir: Path,
    clip_bounds: dict[str, tuple[float, float]] | None = None,
    names: Names | None = None,
) -> dict[str, list[Path]]:
    """Draw and save every figure, series named by `names` where it has them (`arm_names`); returns
    name → [png, svg]."""
    bounds = {
        a: {
            CALIB_LOW: (b[0], f"fixed 1-ε_low = {b[0]:g}"),
            CALIB_HIGH: (b[1], f"fixed 1+ε_high = {b[1]:g}"),
        }
        for a, b in (clip_bounds or {}).items()
    }
    figures: dict[str, Callable[[], plt.Figure]] = {
        "reward": lambda: step_curves(
            runset, (REWARD_MEAN, ACC_MEAN), "Reward and accuracy vs step", names=names
        ),
        "resp_len": lambda: step_curves(runset, (RESP_LEN_MEAN,), "Response length vs step", names=names),
        "entropy": lambda: step_curves(runset, ("entropy",), "Entropy vs step", names=names),
        "clip_low_neg": lambda: step_curves(runset, (CLIP_LOW_NEG,), "clip/low_neg vs step", names=names),
        "calib_bounds": lambda: step_curves(
            runset, (CALIB_LOW, CALIB_HIGH), "Calibrated clip bounds vs the fixed ones", bounds, names
        ),
        "mismatch_kl": lambda: step_curves(
            runset, (MISMATCH_KL_K3,), "Rollout/trainer mismatch KL vs step", names=names
        ),
        "ratio_tails": lambda: ratio_tails(runset, names),
        "ratio_hist": lambda: ratio_hist(runset, clip_bounds or {}, names),
        "eval_scores": lambda: eval_bars(comparison, keys, runset, names),
        "throughput": lambda: throughput_bars(throughput, names),
    }
    return {name: save_figure(figures[name](), out_dir, name) for name in CORE}  # fp8rl.report.figures
