"""Time to divergence per arm of a study tier without a noise-dose axis (fp8rl.report.study_survival):
the table's counts, exact intervals and Kaplan-Meier medians against hand-computed values, the figure,
and which tiers have them (a dose-axis study keeps the stability report instead)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fp8rl.config import ExperimentConfig
from fp8rl.report.paths import SURVIVAL_PLOTS, SURVIVAL_TABLES, ReportPaths, report_outputs

ROOT = Path(__file__).resolve().parents[3]
STEPS = 10
# run id -> (status, first divergence (kind, step) or None, last step written). The runs train on after
# their first divergence (`on_divergence: continue`), as the clipping tier's do.
RUNS = {
    "grpo/m/bf16/none/none/seed0": ("ok", None, STEPS),
    "grpo/m/bf16/none/none/seed1": ("ok", None, STEPS),
    "grpo/m/bf16/none/none/seed2": ("ok", None, STEPS),
    # bf16 seed3: missing (never ran)
    "grpo/m/fp8/tensorwise/s4/seed0": ("diverged", ("entropy_spike", 3), STEPS),
    "grpo/m/fp8/tensorwise/s4/seed1": ("diverged", ("gibberish", 5), STEPS),
    "grpo/m/fp8/tensorwise/s4/seed2": ("diverged", ("gibberish", 5), STEPS),
    "grpo/m/fp8/tensorwise/s4/seed3": ("ok", None, STEPS),
    "grpo/m/fp8_tis/tensorwise/s4/seed0": ("diverged", ("reward_collapse", 7), STEPS),
    "grpo/m/fp8_tis/tensorwise/s4/seed1": ("ok", None, STEPS),
    "grpo/m/fp8_tis/tensorwise/s4/seed2": ("ok", None, STEPS),
    "grpo/m/fp8_tis/tensorwise/s4/seed3": ("failed", None, 4),
}


def _config(tmp_path: Path) -> ExperimentConfig:
    """A clipping-like study: every FP8 arm at one dose (no dose axis), arms named apart from variants."""
    return ExperimentConfig.model_validate(
        {
            "tier": "clipping",
            "results_dir": str(tmp_path),
            "models": [{"name": "m", "source": "scratch"}],
            "matrix": {
                "algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8", "fp8_tis"],
                "granularities": ["tensorwise"], "seeds": [0, 1, 2, 3],
                "conditions": [{"name": "s4", "fp8": {"noise_scale": 4}, "variants": ["fp8", "fp8_tis"]}],
            },
            "schedule": {"steps": STEPS},
            "stability": {"on_divergence": "continue"},
            "study": {
                "arms": {"control": "grpo/m/bf16/none/none", "plain": "grpo/m/fp8/tensorwise/s4",
                         "with_tis": "grpo/m/fp8_tis/tensorwise/s4"},
                "min_effect": 0.1, "planning_sd": 0.1, "min_seeds": 2,
                "planned": [{"name": "tis_vs_plain", "arm": "with_tis", "reference": "plain"}],
            },
        }
    )  # fmt: skip


def _reward(run_id: str, step: int) -> float:
    """A reward that differs by arm and seed: the reward-gap figure's input."""
    seed = int(run_id.rsplit("seed", 1)[1])
    return 0.3 + 0.02 * seed + (0.0 if "/bf16/" in run_id else -0.1) + 0.001 * step


def _write_runs(paths: ReportPaths) -> None:
    """Each run's metrics.jsonl and summary.json as the trainer writes them (fp8rl.run_records)."""
    for run_id, (status, div, last) in RUNS.items():
        root = paths.runs_dir / run_id
        root.mkdir(parents=True)
        lines = [
            {"step": s, "reward/mean": _reward(run_id, s), "acc/mean": 0.3,
             "entropy": 9.0 if div and s >= div[1] else 1.0,
             "gibberish/rate": 0.0, "clip/low_neg": 0.01}
            for s in range(1, last + 1)
        ]  # fmt: skip
        (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        summary = {"run_id": run_id, "status": status, "reason": None, "step": last,
                   "steps_planned": STEPS, "final": lines[-1]}  # fmt: skip
        if div:
            kind, step = div
            summary["reason"] = f"{kind} at step {step}"
            summary["divergence"] = {"kind": kind, "step": step, "reason": summary["reason"]}
        if status == "failed":
            summary["reason"] = "RuntimeError: boom"
        (root / "summary.json").write_text(json.dumps(summary))


def _exact(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson by its beta-quantile definition (not the code under test's binomtest)."""
    low = 0.0 if k == 0 else stats.beta.ppf(0.025, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
    return low, high


def _md_rows(md: str) -> list[list[str]]:
    """The body rows of a Markdown table, as stripped cells."""
    lines = [x for x in md.splitlines() if x.startswith("|")][2:]
    return [[c.strip() for c in x.strip("|").split("|")] for x in lines]


def test_a_study_tier_report_has_time_to_divergence_per_arm(tmp_path):
    from fp8rl.report.build import build_report

    cfg = _config(tmp_path)
    paths = ReportPaths.for_config(cfg)
    assert paths.study and not paths.stability and paths.survival
    _write_runs(paths)
    manifest = build_report(cfg)
    for path in paths.outputs():
        assert path.is_file(), path
    for name in SURVIVAL_PLOTS:
        for ext in ("png", "svg"):
            assert str(paths.plot(name, ext)) in manifest["outputs"]
            assert paths.plot(name, ext).stat().st_size > 1000
    assert not paths.plot("survival", "png").exists()  # the dose-axis figure is not written here

    table = pd.read_csv(paths.table("study_survival", "csv"), keep_default_na=False, na_values=[""])
    assert list(table["arm"]) == ["control", "plain", "with_tis"]  # the study's names, in its order
    t = table.set_index("arm")
    assert t["runs"].tolist() == [4, 4, 4] and t["trained"].tolist() == [3, 4, 3]  # missing, failed out
    assert t["diverged"].tolist() == [0, 3, 1]
    # plain: 4 at risk, 1 diverges at step 3 -> S = 3/4; 3 at risk, 2 diverge at step 5 -> S = 3/4 * 1/3
    # = 1/4 <= 1/2: the median is step 5; the survivor is censored at step 10
    assert t.loc["plain", "median_div_step"] == 5.0
    assert (t.loc["plain", "div_step_min"], t.loc["plain", "div_step_max"]) == (3.0, 5.0)
    assert t.loc["plain", "kinds"] == "gibberish: 2, entropy_spike: 1"
    assert (t.loc["plain", "censored"], t.loc["plain", "censored_at_max"]) == (1, 10.0)
    assert (t.loc["plain", "diverged_low"], t.loc["plain", "diverged_high"]) == pytest.approx(
        _exact(3, 4), abs=1e-6
    )
    # with_tis: 1 of 3 diverged (S = 2/3 > 1/2): no median; the failed run is not in the curve
    assert math.isnan(t.loc["with_tis", "median_div_step"])
    assert t.loc["with_tis", "diverged_frac"] == pytest.approx(1 / 3)
    assert (t.loc["with_tis", "diverged_low"], t.loc["with_tis", "diverged_high"]) == pytest.approx(
        _exact(1, 3), abs=1e-6
    )
    assert t.loc["control", "diverged_low"] == 0.0 and math.isnan(t.loc["control", "div_step_min"])
    assert t.loc["control", "censored_at_min"] == t.loc["control", "censored_at_max"] == 10.0
    # entropy 1 until the divergence step, 9 from it; baseline: the median of the first 5 steps. plain's
    # peaks: the spike at step 3 is inside its own baseline (median 9: peak 1), the two at step 5 are not
    # (median 1: peak 9), the survivor 1 -> median 5, max 9
    assert (t.loc["plain", "peak_rel_entropy_median"], t.loc["plain", "peak_rel_entropy_max"]) == (5.0, 9.0)
    assert (t.loc["with_tis", "peak_rel_entropy_median"], t.loc["with_tis", "peak_rel_entropy_max"]) == (
        1.0,
        9.0,
    )
    assert t.loc["control", "peak_rel_entropy_max"] == 1.0

    md = paths.table("study_survival", "md").read_text()
    rows = {cells[0]: cells[1:] for cells in _md_rows(md)}
    low, high = _exact(3, 4)
    assert rows["plain"] == ["grpo/m/fp8/tensorwise/s4", "4", f"3/4 = 0.750 [{low:.3f}, {high:.3f}]", "5", "3-5",
                             "gibberish: 2, entropy_spike: 1", "1 at 10", "5.00, 9.00"]  # fmt: skip
    assert rows["control"][2:] == ["0/3 = 0.000 [0.000, 0.708]", "", "", "", "3 at 10", "1.00, 1.00"]
    assert rows["with_tis"][2:4] == ["1/3 = 0.333 [0.008, 0.906]", ""]
    assert "Study arms: time to divergence" in paths.html.read_text()
    assert "nested in base models" not in paths.table("comparison", "md").read_text()  # the seed is the unit
    summary = paths.summary.read_text()
    assert "(tables/study_survival.md)" in summary
    assert "plain 3/4 (gibberish: 2, entropy_spike: 1), median step 5" in summary


def test_the_reward_gap_of_a_run_unit_study_is_welch_over_the_runs_that_trained(tmp_path):
    from fp8rl.report.load import load_tier
    from fp8rl.report.study_gap import reward_gaps

    cfg = _config(tmp_path)
    paths = ReportPaths.for_config(cfg)
    _write_runs(paths)
    gaps = reward_gaps(load_tier(cfg, paths.runs_dir), cfg).set_index(["arm", "step"])
    assert sorted(set(gaps.index.get_level_values("arm"))) == ["plain", "with_tis"]  # control left out
    trained = {r: v for r, v in RUNS.items() if v[0] != "failed"}
    for arm, cell in (("plain", "grpo/m/fp8/tensorwise/s4"), ("with_tis", "grpo/m/fp8_tis/tensorwise/s4")):
        for step in (1, STEPS):
            own = [_reward(r, step) for r in trained if r.startswith(f"{cell}/")]
            ref = [_reward(r, step) for r in trained if r.startswith("grpo/m/bf16/")]
            res = stats.ttest_ind(own, ref, equal_var=False)
            ci = res.confidence_interval(0.95)
            row = gaps.loc[(arm, step)]
            assert [row["gap"], row["low"], row["high"]] == pytest.approx(
                [np.mean(own) - np.mean(ref), ci.low, ci.high]
            )
            assert row["units"] == min(len(own), len(ref)) == 3  # with_tis: the failed run is not in it


def test_every_study_has_the_survival_outputs(tmp_path):
    """A study has its time to divergence per arm, with or without a noise axis (a study on one, as the
    longform tier's failure search, has the stability report's survival per setting beside it)."""
    from fp8rl.config_loader import load_config

    extra = {str(tmp_path / "t" / "tables" / f"{n}.{e}") for n in SURVIVAL_TABLES for e in ("csv", "md")}
    for flags in ({"study": True}, {"study": True, "stability": True}):
        assert extra <= set(report_outputs(tmp_path, "t", **flags)), flags
    for flags in ({}, {"stability": True}, {"mechanism": True}):
        assert not extra & set(report_outputs(tmp_path, "t", **flags)), flags
    assert ReportPaths.for_config(load_config(ROOT / "config" / "clipping.yaml")).survival
    learn = ReportPaths.for_config(load_config(ROOT / "config" / "learn.yaml"))
    assert learn.study and learn.stability and learn.survival


def test_a_study_on_the_held_out_endpoint_has_no_secondary_re_read(tmp_path):
    """The secondary table re-reads a study on the held-out endpoint; a study whose registered endpoint
    is already held-out (the longform failure search's) has nothing to re-read."""
    from fp8rl.config import ExperimentConfig
    from fp8rl.report.paths import report_flags

    def cfg(metric: str) -> ExperimentConfig:
        return ExperimentConfig.model_validate(
            {
                "tier": "t", "results_dir": str(tmp_path), "models": [{"name": "m", "source": "scratch"}],
                "matrix": {"algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8_tis"],
                           "seeds": [0, 1]},
                "eval": {"lm_eval_tasks": [], "agent": [], "heldout": {"prompts": 8, "samples": 2}},
                "study": {"arms": {"bf16": "grpo/m/bf16/none", "tis": "grpo/m/fp8_tis/tensorwise"},
                          "endpoint": {"metric": metric}, "min_effect": 0.1, "planning_sd": 0.05,
                          "min_seeds": 2, "planned": [{"name": "tis_vs_bf16", "arm": "tis", "reference": "bf16"}]},
            }
        )  # fmt: skip

    assert report_flags(cfg("reward/mean"))["heldout"] is True
    assert report_flags(cfg("heldout/sampled_reward"))["heldout"] is False
