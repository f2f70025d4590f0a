"""What every report figure shares: matplotlib on its file backend (Agg), the panel size, a grid of
panels (`figure_grid`), how a figure is saved (`save_figure`: PNG and SVG, the same bytes for the same
data), how a series is named (`series_label`: `variant/granularity/condition`, or a study's arm name,
`arm_names`, as the tables name it), coloured (`distinct_colors`) and its legend placed
(`place_legends`). fp8rl.report.plots, stability_plots, study_gap and mechanism draw with these.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fp8rl.config.runs import RunSpec  # noqa: E402
from fp8rl.io import atomic_write  # noqa: E402
from fp8rl.report.paths import PLOT_FORMATS  # noqa: E402

PANEL = (4.6, 3.2)
# SVG text as <text> (not glyph paths): smaller files, and much faster to write
matplotlib.rcParams["svg.fonttype"] = "none"


LEGEND_IN_PANEL_MAX = 8  # more series than this get one figure legend under the panels
SERIES = ["variant", "granularity", "condition"]  # one curve, bar or histogram per series


Names = dict[tuple[str, str, str], str]  # (variant, granularity, condition) -> the series' name


def _cond(condition: str | None) -> str:
    return "none" if condition is None or pd.isna(condition) else condition


def series_label(
    variant: str, granularity: str, condition: str | None = None, names: Names | None = None
) -> str:
    """The series' name in `names` (a study's arm: `arm_names`), else `fp8_calib/tensorwise`, plus `/s4`
    for a study tier's FP8 condition (bf16's `none` is left off)."""
    if names and (name := names.get((variant, granularity, _cond(condition)))) is not None:
        return name
    label = variant if granularity == "none" else f"{variant}/{granularity}"
    return label if _cond(condition) == "none" else f"{label}/{condition}"


def arm_names(arms: dict[str, str]) -> Names:
    """(variant, granularity, condition) -> arm name of a study's `arms` (name -> run-id prefix), so that
    the figures name a series as the study's tables do; a series two arms share (of two algorithms or
    models) keeps its default label."""
    keys: dict[tuple[str, str, str], list[str]] = {}
    for name, cell in arms.items():
        spec = RunSpec.parse(f"{cell.strip('/')}/seed0")
        keys.setdefault((spec.variant, spec.granularity, _cond(spec.condition)), []).append(name)
    return {key: names[0] for key, names in keys.items() if len(names) == 1}


def series_groups(frame: pd.DataFrame):
    """`groupby` over SERIES in matrix order, keeping the runs whose condition is None."""
    return frame.groupby(SERIES, sort=False, dropna=False)


def figure_grid(n_cols: int, n_rows: int = 1) -> tuple[plt.Figure, np.ndarray]:
    fig, axes = plt.subplots(
        n_rows,
        max(n_cols, 1),
        figsize=(PANEL[0] * max(n_cols, 1), PANEL[1] * n_rows),
        squeeze=False,
        layout="constrained",
    )
    return fig, axes


def no_data(ax: plt.Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")


# What makes a figure file the same bytes for the same data: the SVG without its creation date and with
# element ids hashed from a fixed salt (matplotlib draws them at random otherwise); the PNG has no date.
SAVE_METADATA = {"svg": {"Date": None}, "png": {}}
SVG_SALT = {"svg.hashsalt": "fp8rl"}


def save_figure(fig: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    """Write `name.png` and `name.svg` atomically, byte for byte the same for the same figure; returns
    their paths."""
    paths = []
    with matplotlib.rc_context(SVG_SALT):
        for ext in PLOT_FORMATS:
            path = out_dir / f"{name}.{ext}"
            meta = SAVE_METADATA.get(ext, {})
            atomic_write(
                path, lambda tmp, ext=ext, meta=meta: fig.savefig(tmp, format=ext, dpi=100, metadata=meta)
            )
            paths.append(path)
    plt.close(fig)
    return paths


def place_legends(fig: plt.Figure, axes: np.ndarray, n_series: int, fontsize: int = 6) -> None:
    """A legend in each panel that drew something, or, past LEGEND_IN_PANEL_MAX series (a study tier's
    conditions), one legend under the panels so that no panel is buried under its own."""
    if n_series <= LEGEND_IN_PANEL_MAX:
        for ax in axes.flat:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=fontsize)
        return
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    width, height = fig.get_size_inches()
    ncols = max(1, min(4, int(width // 2.6)))
    fig.set_size_inches(width, height + 0.14 * -(-len(handles) // ncols))  # room for the legend's rows
    fig.legend(
        list(handles.values()), list(handles), loc="outside lower center", ncols=ncols, fontsize=fontsize
    )


def distinct_colors(n: int) -> list[str]:
    """`n` colors, no two alike: matplotlib's default cycle up to 10, `tab20` up to 20, beyond that `n`
    evenly spaced hues of `turbo` (a study tier's conditions give more series than any fixed cycle)."""
    if n <= 10:  # tab10: the default cycle's colors, as hex (a prop cycle takes no "C0" references)
        return [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab10").colors[:n]]
    if n <= 20:
        return [matplotlib.colors.to_hex(c) for c in plt.get_cmap("tab20").colors[:n]]
    turbo = plt.get_cmap("turbo")
    return [matplotlib.colors.to_hex(turbo(0.05 + 0.9 * i / (n - 1))) for i in range(n)]
