"""A matrix with FP8 conditions: the condition column and grouping of the comparison table, the
mechanism table (settings, excess clipping, calibrated bounds), its figures and the report outputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_fixtures import (
    MECHANISM_CONDITIONS,
    MECHANISM_GRANULARITIES,
    MECHANISM_SEEDS,
    STEPS,
    phantom_low_neg,
    phantom_missed_neg,
    write_mechanism_tier,
)

from fp8rl.config.runs import RunSpec
from fp8rl.report.build import build_report
from fp8rl.report.comparison import comparison_table
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.load import load_tier
from fp8rl.report.mechanism import gemm_format, mechanism_table, mechanism_view
from fp8rl.report.paths import MECHANISM_PLOTS, ReportPaths, report_outputs
from fp8rl.report.pipeline import RUN_COLUMNS, runs_table


@pytest.fixture(scope="module")
def mech(tmp_path_factory):
    cfg = write_mechanism_tier(tmp_path_factory.mktemp("mech"))
    rs = load_tier(cfg)
    ends = endpoints_table(rs, cfg)
    comparison = comparison_table(rs, ends)
    return cfg, rs, comparison, mechanism_table(comparison, ends, cfg)


def test_comparison_groups_by_condition_with_bf16_as_every_groups_reference(mech):
    _, rs, t, _ = mech
    assert list(t.columns[:5]) == ["algo", "model", "granularity", "condition", "variant"]
    names = [c["name"] for c in MECHANISM_CONDITIONS]
    groups = t[["granularity", "condition"]].drop_duplicates()
    assert len(groups) == len(MECHANISM_GRANULARITIES) * len(names)
    variants = t.groupby(["granularity", "condition"])["variant"].apply(list)
    assert all(v == ["bf16", "fp8", "fp8_calib"] for v in variants)
    assert (t["runs"] == len(MECHANISM_SEEDS)).all()
    bf16 = t[t["variant"] == "bf16"]
    assert bf16["clip_low_neg"].nunique() == 1  # the same bf16 runs in every group
    runs = runs_table(rs)
    assert list(runs.columns) == ["run_id", "condition", *RUN_COLUMNS[1:]]
    assert set(runs["condition"]) == {"none", *names}


def test_mechanism_table_has_each_conditions_settings_and_its_excess_clipping(mech):
    cfg, _, _, m = mech
    assert len(m) == len(MECHANISM_CONDITIONS) * len(MECHANISM_GRANULARITIES) * 2
    for _, r in m.iterrows():
        fp8 = cfg.fp8_for(r["condition"])
        assert (r["format"], r["noise_scale"], r["kv_cache"]) == (fp8.format, fp8.noise_scale, fp8.kv_cache)
        spec = [
            RunSpec("grpo", "tiny", r["variant"], r["granularity"], s, r["condition"])
            for s in MECHANISM_SEEDS
        ]
        low = np.mean([[phantom_low_neg(s, k, fp8.noise_scale) for k in range(1, STEPS + 1)] for s in spec])
        missed = np.mean([[phantom_missed_neg(s, k) for k in range(1, STEPS + 1)] for s in spec])
        assert r["excess_clip"] == pytest.approx(low - missed)
        assert r["excess_clip ci_low"] <= r["excess_clip"] <= r["excess_clip ci_high"]
        assert r["seeds"] == len(MECHANISM_SEEDS)
        assert r["bf16_clip_low_neg"] < r["clip_low_neg"]
        assert math.isnan(r["calib_low"]) == (r["variant"] == "fp8")
    kv_off = m[m["condition"] == "hybrid_s1_nokv"]
    assert not kv_off["kv_cache"].any() and m[m["condition"] != "hybrid_s1_nokv"]["kv_cache"].all()
    calib = m[m["variant"] == "fp8_calib"]
    assert calib["calib_low"].to_numpy() == pytest.approx(0.7 + 0.01 * np.mean(MECHANISM_SEEDS))
    # the dose shows: excess clipping and mismatch KL rise with noise_scale in every series
    for _, sub in m[m["kv_cache"]].groupby(["format", "granularity", "variant"]):
        sub = sub.sort_values("noise_scale")
        assert sub["excess_clip"].is_monotonic_increasing and sub["mismatch_kl_k3"].is_monotonic_increasing


def test_gemm_format_says_which_granularities_ignore_the_configured_format():
    assert gemm_format("tensorwise", "hybrid") == "hybrid"
    assert gemm_format("delayed", "e5m2") == "e5m2"
    assert {gemm_format(g, "e5m2") for g in ("rowwise", "blockwise", "mxfp8")} == {"e4m3"}


def test_mechanism_view_folds_intervals_and_blanks_calib_for_fp8(mech):
    *_, m = mech
    view = mechanism_view(m)
    first = view.iloc[0]
    assert first["variant"] == "fp8" and first["calib_low"] == "" and first["excess_clip"].startswith("+")
    assert "[" in first["excess_clip"] and "[" in first["Δ clip_low_neg"]
    assert view.iloc[1]["calib_low"].startswith("0.71")


def test_report_writes_the_mechanism_outputs_only_for_matrices_with_conditions(mech, tmp_path):
    cfg, *_ = mech
    paths = ReportPaths.for_config(cfg)
    assert paths.mechanism and paths.table("mechanism", "md") in paths.outputs()
    plain = set(report_outputs(tmp_path, "mechanism"))
    extra = set(report_outputs(tmp_path, "mechanism", mechanism=True)) - plain
    assert not any("mechanism_" in p or "mechanism." in p for p in plain)
    assert {p.rsplit("/", 1)[-1] for p in extra} == {
        "mechanism.csv", "mechanism.md", "mismatch.csv", "mismatch.md",
        *(f"{n}.{e}" for n in MECHANISM_PLOTS for e in ("png", "svg")),
    }  # fmt: skip
    manifest = build_report(cfg)
    assert manifest["mechanism"] is True
    for out in paths.outputs():
        assert out.is_file() and out.stat().st_size > 0, out
    for name in MECHANISM_PLOTS:
        assert paths.plot(name, "png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths.table("mechanism", "md").read_text()
    assert "the seed is the unit" in md and "hybrid_s1_nokv" in md and "| off " in md
    assert "bootstrap" not in md
    html = paths.html.read_text()
    assert "Mechanism: excess clipping vs FP8 condition" in html and "Paired: FP8 vs its BF16 shadow" in html
    comparison_md = paths.table("comparison", "md").read_text()
    assert "## grpo / tiny / blockwise / e5m2_s4" in comparison_md


def test_curves_and_throughput_keep_each_condition_apart(mech):
    """A dose sweep's conditions are separate series: one curve per (variant, granularity, condition)
    and one throughput row each, never pooled across doses."""
    from fp8rl.report.plots import step_curves
    from fp8rl.report.throughput_table import throughput_table

    cfg, rs, _, _ = mech
    fig = step_curves(rs, ("phantom/low_neg",), "phantom clipping")
    labels = [line.get_label() for line in fig.axes[0].lines if not line.get_label().startswith("_")]
    names = [c["name"] for c in MECHANISM_CONDITIONS]
    expected = [f"{v}/{g}/{c}" for v in ("fp8", "fp8_calib") for g in MECHANISM_GRANULARITIES for c in names]
    assert sorted(labels) == sorted(expected)
    # each curve is its own series' seed mean: phantom clipping grows with the dose in the fixture
    curves = {line.get_label(): line for line in fig.axes[0].lines}
    s1, s4 = curves["fp8/tensorwise/hybrid_s1"], curves["fp8/tensorwise/hybrid_s4"]
    assert np.mean(s4.get_ydata()) > np.mean(s1.get_ydata())
    tp = throughput_table(rs)
    assert "condition" in tp and len(tp) == len(expected) + 1  # and bf16
    assert set(tp[tp["variant"] == "fp8"]["condition"]) == set(names)


def test_many_series_share_one_legend_under_the_panels(mech):
    """29 series would bury a panel under its legend: they get one figure legend instead."""
    from fp8rl.report.plots import step_curves

    _, rs, _, _ = mech
    fig = step_curves(rs, ("phantom/low_neg", "entropy"), "many")
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 1 + 2 * len(MECHANISM_GRANULARITIES) * len(MECHANISM_CONDITIONS)


def test_eval_bars_draw_bf16_once_with_its_seeds_and_each_condition_apart(mech):
    """bf16 rows carry their comparison group's condition: the bars must still name bf16 once and find
    its seeds (whose condition is `none`), and keep each FP8 condition a bar of its own."""
    from fp8rl.report.plots import eval_bars
    from fp8rl.report.summaries import eval_keys

    _, rs, comparison, _ = mech
    keys = eval_keys(rs)
    assert keys  # the fixture writes eval scores
    fig = eval_bars(comparison, keys[:1], rs)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels.count("grpo/tiny bf16") == 1
    assert "grpo/tiny fp8/tensorwise/hybrid_s4" in labels
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    bf16_y = ax.get_yticks()[labels.index("grpo/tiny bf16")]
    assert sum(len(d.get_xdata()) for d in dots if set(d.get_ydata()) == {bf16_y}) == len(MECHANISM_SEEDS)


def test_every_fp8_variant_of_the_matrix_gets_its_rows_and_its_column_of_panels(mech):
    """The mechanism tier runs the mismatch corrections beside fp8 and fp8_calib: each FP8 variant in
    the comparison has rows in the mechanism table and a column in the figures (vocabulary order)."""
    from fp8rl.report.mechanism import dose_figure

    cfg, rs, comparison, _ = mech
    extra = comparison[comparison["variant"] == "fp8"].assign(variant="fp8_icepop")
    m = mechanism_table(pd.concat([comparison, extra], ignore_index=True), endpoints_table(rs, cfg), cfg)
    assert set(m["variant"]) == {"fp8", "fp8_icepop", "fp8_calib"}
    fig = dose_figure(m, "excess_clip", "excess clipping")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert any("fp8_icepop" in t for t in titles) and len(fig.axes) % 3 == 0


def test_excess_p_is_a_one_sample_t_test_holm_adjusted_over_one_doses_granularities(mech):
    from scipy import stats

    cfg, _, _, m = mech
    for (condition, variant), family in m.groupby(["condition", "variant"]):
        assert len(family) == len(MECHANISM_GRANULARITIES)  # the family: the granularities at one dose
        dose = cfg.fp8_for(condition).noise_scale
        p = {}
        for _, r in family.iterrows():
            seeds = [
                np.mean([phantom_low_neg(s, k, dose) - phantom_missed_neg(s, k) for k in range(1, STEPS + 1)])
                for s in (
                    RunSpec("grpo", "tiny", variant, r["granularity"], n, condition) for n in MECHANISM_SEEDS
                )
            ]
            p[r["granularity"]] = stats.ttest_1samp(seeds, 0.0).pvalue
            assert r["excess_clip p"] == pytest.approx(p[r["granularity"]])
        small, big = sorted(p, key=p.get)  # Holm with two: 2 × the smaller, max(that, the larger)
        adjusted = family.set_index("granularity")["excess_clip p_holm"]
        assert adjusted[small] == pytest.approx(min(1, 2 * p[small]))
        assert adjusted[big] == pytest.approx(max(min(1, 2 * p[small]), p[big]))
    assert "excess p (Holm)" in mechanism_view(m).columns


def test_a_conditions_matrix_with_only_its_bf16_runs_has_no_mechanism_section(tmp_path):
    """The longform tier names its failure search's conditions before its fp8 variants join the matrix:
    its bf16 runs carry condition `none` and nothing is measured per condition yet."""
    from fp8rl.config_loader import load_config
    from fp8rl.report.paths import report_flags

    root = Path(__file__).resolve().parents[3]
    # the config as its acceptance run had it: the conditions named, bf16 the only variant
    cfg = load_config(
        root / "config" / "longform.yaml",
        [f"results_dir={tmp_path}", "matrix.variants=[bf16]", "study=null", "failure_search=null"],
    )
    assert cfg.matrix.conditions and {r.condition for r in cfg.runs()} == {"none"}
    assert report_flags(cfg)["mechanism"] is False
    assert report_flags(load_config(root / "config" / "longform.yaml", [f"results_dir={tmp_path}"]))[
        "mechanism"
    ]
