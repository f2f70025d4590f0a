"""The report's figures say what they claim: intervals of proportions stay in [0, 1], every seed is
drawn, the shadow pass is named as such, legends sit outside the bars, and the page explains them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from report_fixtures import seeds_used, write_tier

from fp8rl.report.build import build_report
from fp8rl.report.comparison import comparison_table
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.load import load_tier
from fp8rl.report.plots import eval_bars, step_curves, throughput_bars
from fp8rl.report.summaries import eval_keys


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plots")
    cfg = write_tier(tmp)
    return cfg, load_tier(cfg)


def test_eval_intervals_stay_in_0_1_and_every_seed_is_a_dot(tier):
    cfg, runset = tier
    comparison = comparison_table(runset, endpoints_table(runset, cfg))
    keys = eval_keys(runset)
    # two seeds near the ends of [0, 1]: a t-interval (t = 12.7) runs far past them
    comparison.loc[comparison.index[0], [f"{k} ci_low" for k in keys]] = -0.6
    comparison.loc[comparison.index[0], [f"{k} ci_high" for k in keys]] = 1.7
    fig = eval_bars(comparison, keys, runset)
    for ax, key in zip(fig.axes, keys, strict=False):
        assert ax.get_xlim() == (0.0, 1.0) and ax.get_title() == key
        whiskers = [c for c in ax.collections if isinstance(c, LineCollection)]
        xs = np.concatenate(
            [np.asarray(seg).reshape(-1, 2)[:, 0] for c in whiskers for seg in c.get_segments()]
        )
        xs = xs[np.isfinite(xs)]
        assert xs.size and xs.min() >= 0.0 and xs.max() <= 1.0
        dots = sum(len(line.get_xdata()) for line in ax.lines if line.get_marker() == "o")
        used = sum(len(seeds_used(cfg, a, v)) for a in cfg.matrix.algorithms for v in cfg.matrix.variants)
        assert dots == used  # each seed whose run counts (ok or diverged) is drawn once
    width, height = fig.get_size_inches() * 100
    assert width < 1600 and height >= 300  # no longer a 2300 x 320 strip


def test_throughput_names_the_shadow_pass_and_keeps_the_legend_off_the_bars():
    table = pd.DataFrame(
        {
            "algo": ["grpo"] * 3, "model": ["tiny"] * 3, "variant": ["bf16", "fp8", "fp8_calib"],
            "granularity": ["none", "tensorwise", "tensorwise"], "execution": ["emulated"] * 3,
            "rollout tok/s": [100.0, 120.0, 120.0], "calib tok/s": [np.nan, 300.0, 250.0],
        }
    )  # fmt: skip
    fig = throughput_bars(table)
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["rollout", "calib (calibrated clipping)", "shadow pass (diagnostics, no calibration)"]


def test_calib_bounds_are_drawn_against_the_fixed_ones(tier):
    _, runset = tier
    bounds = {"grpo": {"calib/low": (0.8, "fixed 1-ε_low = 0.8")}}
    fig = step_curves(runset, ("calib/low", "calib/high"), "bounds", bounds)
    grpo_low = fig.axes[0]
    assert [t.get_text() for t in grpo_low.get_legend().get_texts()] == [
        "fp8_calib/tensorwise",
        "fixed 1-ε_low = 0.8",
    ]
    (fixed,) = [line for line in grpo_low.lines if line.get_linestyle() == "--"]
    assert set(fixed.get_ydata()) == {0.8}


def test_report_page_explains_the_mechanism_before_the_numbers(tier):
    cfg, _ = tier
    build_report(cfg)
    page = (Path(cfg.results_dir) / cfg.tier / "report.html").read_text()
    assert page.index('id="mechanism"') < page.index("<h2>Comparison</h2>")
    for term in ("Phantom clipping", "fp8_tis", "fp8_calib", "Reading the ratio histograms"):
        assert f"<dt>{term}</dt>" in page


@pytest.mark.parametrize("n", [1, 10, 11, 20, 29])
def test_distinct_colors_gives_n_different_colors(n):
    from matplotlib.colors import to_hex

    from fp8rl.report.plot_base import distinct_colors

    assert len({to_hex(c) for c in distinct_colors(n)}) == n


def test_no_two_reward_curves_share_a_color_in_a_tier_with_many_series(tmp_path):
    from report_fixtures import write_mechanism_tier

    from fp8rl.vocabulary import REWARD_MEAN

    rs = load_tier(write_mechanism_tier(tmp_path))
    fig = step_curves(rs, (REWARD_MEAN, "entropy"), "reward")
    for ax in fig.axes:
        lines = [
            ln for ln in ax.get_lines() if not ln.get_label().startswith("_") and ln.get_linestyle() != "None"
        ]
        colors = {ln.get_label(): ln.get_color() for ln in lines}
        assert len(colors) > 11  # more series than the default cycle has colors
        assert len(set(colors.values())) == len(colors), colors


def _inside_figure(fig) -> bool:
    """Whether every text of `fig` (titles, tick labels, legends) lies inside the saved canvas."""
    fig.canvas.draw()
    canvas = fig.bbox
    renderer = fig.canvas.get_renderer()
    texts = fig.findobj(lambda o: hasattr(o, "get_text") and hasattr(o, "get_window_extent"))
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]
    return all(b.x0 >= -1 and b.y0 >= -1 and b.x1 <= canvas.x1 + 1 and b.y1 <= canvas.y1 + 1 for b in boxes)


def test_a_one_panel_throughput_figure_keeps_its_title_inside_the_canvas():
    """A tier with one algorithm and model draws one panel: its title's note once ran past both edges."""
    table = pd.DataFrame(
        {
            "algo": ["grpo"] * 3, "model": ["tiny"] * 3, "variant": ["bf16", "fp8", "fp8_tis"],
            "granularity": ["none", "tensorwise", "tensorwise"], "condition": ["none", "s1", "s4"],
            "execution": ["emulated"] * 3, "rollout tok/s": [100.0, 120.0, 120.0],
            "calib tok/s": [np.nan, 300.0, 250.0],
        }
    )  # fmt: skip
    assert _inside_figure(throughput_bars(table))


def test_a_study_names_its_series_as_its_tables_name_arms():
    """`arm_names` maps each arm's cell to its name: the legends read `fp8_s4`, as arms.csv does; a cell
    that is no arm keeps `variant/granularity/condition`."""
    from fp8rl.report.plot_base import arm_names, series_label

    names = arm_names({"bf16": "grpo/tiny/bf16/none/none", "fp8_s4": "grpo/tiny/fp8/tensorwise/s4/"})
    assert series_label("bf16", "none", None, names) == "bf16"
    assert series_label("fp8", "tensorwise", "s4", names) == "fp8_s4"
    assert series_label("fp8", "tensorwise", "s8", names) == "fp8/tensorwise/s8"
    # two arms of one series (two algorithms): the series keeps its own label
    both = arm_names({"a": "grpo/tiny/fp8/tensorwise/s4", "b": "dapo/tiny/fp8/tensorwise/s4"})
    assert series_label("fp8", "tensorwise", "s4", both) == "fp8/tensorwise/s4"


def test_the_band_is_the_middle_half_of_the_seeds_not_their_extremes(tier):
    """Each curve's band spans the 25th to 75th percentile of its seeds at each step: with many seeds
    or bases a min–max band covers every series alike."""
    from fp8rl.vocabulary import REWARD_MEAN

    _, runset = tier
    fig = step_curves(runset, (REWARD_MEAN,), "reward")
    ax = fig.axes[0]
    data = runset.metric("train", REWARD_MEAN)
    data = data[
        (data["algo"] == "grpo") & (data["variant"] == "bf16") & data["status"].isin(["ok", "diverged"])
    ]
    q = data.groupby("step")["value"].quantile([0.25, 0.75]).unstack()
    band = ax.collections[0]  # bf16's band: the first series
    ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
    assert np.isclose(ys.min(), q[0.25].min()) and np.isclose(ys.max(), q[0.75].max())
