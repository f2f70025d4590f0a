"""Comparison and throughput tables on synthetic runs: shapes, counts and values (CIs vs scipy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from report_fixtures import (
    DIVERGED,
    FAILED,
    METRIC_KEYS,
    MISSING,
    STEP_TIME,
    clip_low_neg,
    entropy,
    eval_score,
    metrics_row,
    phantom_low_neg,
    phantom_missed_neg,
    seeds_used,
    steps_of,
    write_tier,
)
from scipy import stats

from fp8rl.config.runs import RunSpec
from fp8rl.report.comparison import comparison_table
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.load import load_tier
from fp8rl.report.markdown import comparison_markdown, comparison_view, paired_view
from fp8rl.report.summaries import eval_keys
from fp8rl.report.throughput_table import throughput_table

KEY = "arith_gen/exact_match"


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    cfg = write_tier(tmp_path_factory.mktemp("tier"))
    rs = load_tier(cfg)
    return cfg, rs, comparison_table(rs, endpoints_table(rs, cfg)).set_index(["algo", "variant"])


def test_one_row_per_algo_and_variant_with_every_column(tier):
    _, rs, table = tier
    assert len(table) == 2 * 4
    assert set(table["granularity"]) == {"tensorwise"}
    keys = eval_keys(rs)
    assert keys == ["arith_gen/exact_match", "arith_mc/exact_match", "tool_call/accuracy"]
    for key in keys:
        for suffix in ("mean", "ci_low", "ci_high", "n", "delta", "delta_ci_low", "delta_ci_high"):
            assert f"{key} {suffix}" in table.columns
    for col in (
        "final_reward",
        "best_reward",
        "peak_entropy_rel",
        "clip_low_neg",
        "clip_low_neg ci_low",
        "clip_low_neg delta_ci_high",
        "phantom_low_neg",
        "phantom_missed_neg",
        "excess_clip",
        "mismatch_kl_k3",
    ):
        assert col in table.columns
    assert "condition" not in table.columns and "peak_entropy" not in table.columns


def test_status_counts_never_drop_a_run(tier):
    _, _, t = tier
    assert (t["runs"] == 2).all()
    assert (t["ok"] + t["diverged"] + t["failed"] + t["missing"] == t["runs"]).all()
    assert t.loc[("dapo", "fp8"), ["ok", "diverged"]].tolist() == [1, 1]
    assert t.loc[("dapo", "fp8_tis"), ["ok", "failed"]].tolist() == [1, 1]
    assert t.loc[("grpo", "fp8_calib"), ["ok", "missing"]].tolist() == [1, 1]


@pytest.mark.parametrize("algo,variant", [("grpo", "fp8"), ("dapo", "fp8"), ("dapo", "fp8_calib")])
def test_eval_mean_ci_and_delta_match_scipy(tier, algo, variant):
    cfg, _, t = tier
    x = [eval_score(s, "arith_gen") for s in seeds_used(cfg, algo, variant)]
    ref = [eval_score(s, "arith_gen") for s in seeds_used(cfg, algo, "bf16")]
    row = t.loc[(algo, variant)]
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
    assert row[f"{KEY} mean"] == pytest.approx(np.mean(x))
    # exact_match is a proportion: its interval is the t-interval cut to [0, 1], its Δ's to [-1, 1]
    assert (row[f"{KEY} ci_low"], row[f"{KEY} ci_high"]) == pytest.approx((max(ci.low, 0), min(ci.high, 1)))
    d = stats.ttest_ind(x, ref, equal_var=False).confidence_interval(0.95)
    assert row[f"{KEY} delta"] == pytest.approx(np.mean(x) - np.mean(ref))
    assert (row[f"{KEY} delta_ci_low"], row[f"{KEY} delta_ci_high"]) == pytest.approx(
        (max(d.low, -1), min(d.high, 1))
    )
    assert math.isnan(t.loc[(algo, "bf16"), f"{KEY} delta"])


def test_single_seed_has_no_interval_and_says_so(tier):
    cfg, rs, t = tier
    for algo, variant in [("grpo", "fp8_calib"), ("dapo", "fp8_tis")]:  # one missing, one failed seed
        row = t.loc[(algo, variant)]
        assert row[f"{KEY} n"] == 1
        assert not math.isnan(row[f"{KEY} mean"])
        assert math.isnan(row[f"{KEY} ci_low"]) and math.isnan(row[f"{KEY} delta_ci_low"])
    md = comparison_markdown(
        "t", comparison_view(comparison_table(rs, endpoints_table(rs, cfg)), eval_keys(rs))
    )
    assert "n=1, no CI" in md and "Student t-interval" in md and "Welch" in md


def test_intervals_of_proportions_stay_in_their_range(tier):
    """Every interval of a proportion in the table lies in [0, 1], of a difference of two in [-1, 1] (the
    cut itself: tests/unit/stats/test_intervals.py)."""
    _, rs, t = tier
    for key in eval_keys(rs):
        low, high = t[f"{key} ci_low"].dropna(), t[f"{key} ci_high"].dropna()
        assert (low >= 0).all() and (high <= 1).all()
        d_low, d_high = t[f"{key} delta_ci_low"].dropna(), t[f"{key} delta_ci_high"].dropna()
        assert (d_low >= -1).all() and (d_high <= 1).all()
    for col in ("clip_low_neg", "phantom_low_neg", "phantom_missed_neg"):
        assert (t[f"{col} ci_low"].dropna() >= 0).all() and (t[f"{col} ci_high"].dropna() <= 1).all()
    assert (t["excess_clip ci_low"].dropna() >= -1).all() and (t["mismatch_kl_k3 ci_low"].dropna() >= 0).all()


def _peak_rel(spec, baseline_steps: int) -> float:
    values = [entropy(spec, s) for s in range(1, steps_of(spec) + 1)]
    if spec.run_id == DIVERGED:
        values[-1] = math.nan  # its last line logs a NaN entropy
    tail = [v for v in values[baseline_steps:] if math.isfinite(v)]
    return max(tail) / float(np.median(values[:baseline_steps]))


def test_peak_entropy_is_relative_to_the_early_baseline_so_a_spike_shows(tier):
    cfg, _, t = tier
    runs = {s.run_id: s for s in cfg.runs()}
    div, ok = runs[DIVERGED], runs[DIVERGED.replace("seed1", "seed0")]
    base = cfg.stability.baseline_steps
    assert _peak_rel(ok, base) < 1 < 3 < _peak_rel(div, base)  # falling entropy vs the spike to 9.0
    assert t.loc[("dapo", "fp8"), "peak_entropy_rel"] == pytest.approx(
        np.mean([_peak_rel(ok, base), _peak_rel(div, base)])
    )
    assert t.loc[("dapo", "fp8"), "peak_entropy_rel n"] == 2
    # not the step-1 value: every smooth run's peak is below its baseline
    assert t.loc[("grpo", "bf16"), "peak_entropy_rel"] < 1


def test_missing_metric_lowers_n_and_phantom_for_every_fp8_variant(tier):
    _, _, t = tier
    assert t.loc[("grpo", "bf16"), "mismatch_kl_k3 n"] == 1  # NO_KL never logged it
    assert t.loc[("dapo", "bf16"), "mismatch_kl_k3 n"] == 2
    for col in ("phantom_low_neg", "phantom_missed_neg", "excess_clip"):
        assert math.isnan(t.loc[("grpo", "bf16"), col]) and t.loc[("grpo", "bf16"), f"{col} n"] == 0
        assert t.loc[("grpo", "fp8"), f"{col} n"] == 2 and t.loc[("grpo", "fp8_tis"), f"{col} n"] == 2


def _mean_of_means(values_per_seed):
    return float(np.mean([np.mean(v) for v in values_per_seed]))


def test_clip_low_neg_gets_a_t_interval_over_seed_means_and_a_welch_delta_vs_bf16(tier):
    cfg, _, t = tier
    per_seed = {
        v: [[clip_low_neg(s, k) for k in range(1, steps_of(s) + 1)] for s in seeds_used(cfg, "grpo", v)]
        for v in ("bf16", "fp8")
    }
    means = {v: [np.mean(steps) for steps in per_seed[v]] for v in per_seed}
    row = t.loc[("grpo", "fp8")]
    assert row["clip_low_neg"] == pytest.approx(_mean_of_means(per_seed["fp8"]))
    ci = stats.ttest_1samp(means["fp8"], 0.0).confidence_interval(0.95)  # the seed is the unit
    assert (row["clip_low_neg ci_low"], row["clip_low_neg ci_high"]) == pytest.approx(
        (max(ci.low, 0.0), ci.high)
    )
    assert row["clip_low_neg ci_low"] < row["clip_low_neg"] < row["clip_low_neg ci_high"]
    delta = _mean_of_means(per_seed["fp8"]) - _mean_of_means(per_seed["bf16"])
    assert row["clip_low_neg delta"] == pytest.approx(delta)
    d = stats.ttest_ind(means["fp8"], means["bf16"], equal_var=False).confidence_interval(0.95)
    assert (row["clip_low_neg delta_ci_low"], row["clip_low_neg delta_ci_high"]) == pytest.approx(
        (d.low, d.high)
    )
    assert math.isnan(t.loc[("grpo", "bf16"), "clip_low_neg delta"])
    assert math.isnan(t.loc[("grpo", "fp8_calib"), "clip_low_neg ci_low"])  # one seed (the other missing)


def test_paired_section_is_the_per_step_difference_of_phantom_fractions(tier):
    cfg, rs, t = tier
    for algo, variant in (("grpo", "fp8"), ("dapo", "fp8")):  # dapo/fp8 has the diverged run
        seeds = seeds_used(cfg, algo, variant)
        steps = [range(1, steps_of(s) + 1) for s in seeds]
        low = [[phantom_low_neg(s, k) for k in ks] for s, ks in zip(seeds, steps, strict=True)]
        missed = [[phantom_missed_neg(s, k) for k in ks] for s, ks in zip(seeds, steps, strict=True)]
        row = t.loc[(algo, variant)]
        assert row["phantom_low_neg"] == pytest.approx(_mean_of_means(low))
        assert row["phantom_missed_neg"] == pytest.approx(_mean_of_means(missed))
        assert row["excess_clip"] == pytest.approx(_mean_of_means(low) - _mean_of_means(missed))
        assert row["excess_clip ci_low"] < row["excess_clip"] < row["excess_clip ci_high"]
    table = comparison_table(rs, endpoints_table(rs, cfg))
    view = paired_view(table)
    assert "bf16" not in set(view["variant"]) and len(view) == 2 * 3
    md = comparison_markdown("t", comparison_view(table, eval_keys(rs)), view)
    assert "Paired: FP8 vs its BF16 shadow" in md and "the seed is the unit" in md and "bootstrap" not in md
    assert "phantom/low_neg − phantom/missed_neg" in md


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
@pytest.mark.parametrize("variant", ["bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib"])
def test_fixture_metrics_have_the_key_sets_of_real_runs(algo, variant):
    """The synthetic lines carry exactly the keys real runs log (metric_keys.json, recorded from real
    tiny runs and checked against them by tests/integration/test_report_fixture_keys.py)."""
    gran = "none" if variant == "bf16" else "tensorwise"
    keys = set(metrics_row(RunSpec(algo, "tiny", variant, gran, 0), 1))
    assert keys == set(METRIC_KEYS["metrics"][algo][variant])
    assert {"phantom/low_neg", "phantom/missed_neg"} <= keys or variant == "bf16"
    assert ("calib/ref_tokens" in keys) == variant.endswith("calib")


def test_throughput_table_values(tier):
    _, rs, _ = tier
    tp = throughput_table(rs).set_index(["algo", "variant"])
    assert len(tp) == 8
    assert set(tp["execution"]) == {"emulated"}
    assert tp.loc[("grpo", "fp8"), "speedup_vs_bf16"] == pytest.approx(STEP_TIME["bf16"] / STEP_TIME["fp8"])
    assert tp.loc[("grpo", "bf16"), "speedup_vs_bf16"] == pytest.approx(1.0)
    assert tp.loc[("dapo", "fp8_calib"), "calib_overhead_pct"] == pytest.approx(100 * 0.1 / (1.0 + 0.2 + 0.5))
    assert tp.loc[("dapo", "fp8"), "calib_overhead_pct"] == pytest.approx(100 * 0.1 / (1.0 + 0.2 + 0.5))
    assert math.isnan(tp.loc[("dapo", "bf16"), "calib_overhead_pct"])  # no shadow pass in bf16
    assert tp.loc[("dapo", "fp8_tis"), "runs_measured"] == 1  # the failed seed wrote no throughput.json
    assert tp.loc[("grpo", "fp8_calib"), "runs_measured"] == 1  # the missing one neither
    assert tp.loc[("grpo", "bf16"), "rollout tok/s"] == pytest.approx(768.0)


def test_unrun_granularity_group_is_all_missing_with_bf16_reference(tmp_path):
    cfg = write_tier(tmp_path)
    cfg.matrix.granularities = ["tensorwise", "blockwise"]  # blockwise runs were never written
    rs = load_tier(cfg)
    t = comparison_table(rs, endpoints_table(rs, cfg))
    block = t[(t["algo"] == "grpo") & (t["granularity"] == "blockwise")].set_index("variant")
    assert list(block.index) == ["bf16", "fp8", "fp8_tis", "fp8_calib"]
    assert block.loc["bf16", "ok"] == 2  # the reference rows repeat in each group
    assert (block.loc[["fp8", "fp8_tis", "fp8_calib"], "missing"] == 2).all()
    assert block.loc["fp8", f"{KEY} n"] == 0 and math.isnan(block.loc["fp8", f"{KEY} mean"])
    tp = throughput_table(rs)
    assert (tp[tp["granularity"] == "blockwise"]["runs_measured"] == 0).all()
    assert FAILED in set(rs.runs["run_id"]) and MISSING in set(rs.runs["run_id"])
