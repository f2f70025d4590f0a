"""The held-out endpoint over training (fp8rl.report.heldout_curve): on a study tier that keeps its
checkpoints, with every run's base, kept and final scores written by the eval suites' own writers
(`write_eval`, heldout_history's `write_history`), the report's table holds per arm and step the mean over
base means with its t-interval, recomputed here from the values the fixture wrote; a run that stopped
early leaves the later steps, a history of another checkpoint is left out and named; SUMMARY.md shows the
figure, and a tier that keeps no checkpoints has neither."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fp8rl.config import ExperimentConfig
from fp8rl.evaluate.schema import TaskResult, write_eval
from fp8rl.evaluate.suites.heldout_history import history_entry, write_history
from fp8rl.report.paths import ReportPaths, report_flags
from fp8rl.run_files import RunDir
from fp8rl.run_records import build_summary

STEPS, KEEP, SEEDS, BASES = 10, 4, [0, 1, 2, 3], 2
STOPPED = "grpo/m/fp8_tis/tensorwise/s4/seed3"  # diverged at step 6 and stopped: kept step 4 only
RETRAINED = "grpo/m/bf16/none/none/seed2"  # its history scored another checkpoint than the run's


def _config(tmp_path, keep_every: int | None = KEEP) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "tier": "curve", "results_dir": str(tmp_path),
            "models": [{"name": "m", "source": "scratch"}],
            "matrix": {"algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8_tis"],
                       "granularities": ["tensorwise"], "seeds": SEEDS,
                       "conditions": [{"name": "s4", "fp8": {"noise_scale": 4}, "variants": ["fp8_tis"]}]},
            "schedule": {"steps": STEPS, "keep_every": keep_every},
            "sft": {"bases": BASES, "per_seed": True},
            "eval": {"lm_eval_tasks": [], "agent": [], "heldout": {"prompts": 64, "samples": 2}},
            "study": {"unit": "base", "arms": {"control": "grpo/m/bf16/none/none", "tis": "grpo/m/fp8_tis/tensorwise/s4"},
                      "endpoint": {"metric": "heldout/sampled_reward"}, "min_effect": 0.1, "planning_sd": 0.1,
                      "min_seeds": 2, "planned": [{"name": "tis_vs_control", "arm": "tis", "reference": "control"}]},
        }
    )  # fmt: skip


def score(run_id: str, step: int) -> float:
    """A run's held-out score at `step`: its base's, then a climb that differs by arm and seed."""
    seed = int(run_id.rsplit("seed", 1)[1])
    slope = 0.03 if "/bf16/" in run_id else 0.01
    return round(base_score(seed % BASES) + slope * step + 0.004 * seed * math.sin(step), 6)


def base_score(base: int) -> float:
    return 0.2 + 0.1 * base


def _heldout(value: float) -> list[TaskResult]:
    return [TaskResult("heldout", "sampled_reward", value, 0.01, 128)]


def _write_tier(cfg: ExperimentConfig, paths: ReportPaths) -> None:
    for b in range(BASES):
        base = paths.root / "base" / "m" / f"seed{b}"
        write_eval(base / "eval" / "heldout.json", base, "heldout", _heldout(base_score(b)), {})
    for spec in cfg.runs():
        run = RunDir.of(paths.runs_dir, spec.run_id)
        run.root.mkdir(parents=True)
        last = 6 if spec.run_id == STOPPED else STEPS
        for step in range(1, last + 1):
            run.append_metrics({"step": step, "reward/mean": 0.3, "entropy": 1.0})
        div = (
            {"kind": "entropy_spike", "step": 6, "reason": "entropy spike"}
            if spec.run_id == STOPPED
            else None
        )
        run.write_summary(build_summary(spec.run_id, "diverged" if div else "ok", div and div["reason"], last,
                                        STEPS, {}, {}, divergence=div,
                                        base={"name": cfg.base_of("m", spec.seed), "seed": spec.seed % BASES}))  # fmt: skip
        run.checkpoint.mkdir(parents=True)
        (run.checkpoint / "model.safetensors").write_bytes(spec.run_id.encode())
        kept = [s for s in range(KEEP, last + 1, KEEP)]
        history = [
            history_entry(s, run.kept_checkpoint(s), _heldout(score(spec.run_id, s)), "d") for s in kept
        ]
        write_history(run.eval_file("heldout_history"), run.checkpoint, history, {})
        if spec.run_id == RETRAINED:  # trained again since its history was scored
            (run.checkpoint / "model.safetensors").write_bytes(b"other weights")
        write_eval(
            run.eval_file("heldout"), run.checkpoint, "heldout", _heldout(score(spec.run_id, last)), {}
        )


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    from fp8rl.report.build import build_report

    cfg = _config(tmp_path_factory.mktemp("curve"))
    paths = ReportPaths.for_config(cfg)
    assert paths.history
    _write_tier(cfg, paths)
    build_report(cfg)
    return cfg, paths


def _expected(cfg: ExperimentConfig, arm: str, step: int) -> tuple[int, float, float, float] | None:
    """(units, mean, low, high) over base means of the arm's runs scored at `step`, from `score`; the
    interval cut to [0, 1]."""
    prefix = cfg.study.arms[arm]
    per_base: dict[int, list[float]] = {}
    for seed in SEEDS:
        run_id = f"{prefix}/seed{seed}"
        last = 6 if run_id == STOPPED else STEPS
        kept = set(range(KEEP, last + 1, KEEP)) if run_id != RETRAINED else set()
        if step == 0:
            value = base_score(seed % BASES)
        elif step in kept or step == last:
            value = score(run_id, step)
        else:
            continue
        per_base.setdefault(seed % BASES, []).append(value)
    if not per_base:
        return None
    means = np.array([np.mean(v) for v in per_base.values()])
    if len(means) == 1:
        return 1, means[0], math.nan, math.nan
    lo, hi = stats.t.interval(0.95, len(means) - 1, loc=means.mean(), scale=stats.sem(means))
    return len(means), means.mean(), max(lo, 0.0), min(hi, 1.0)  # a held-out score is a proportion


def test_the_curve_is_the_mean_over_base_means_at_every_scored_step(tier):
    cfg, paths = tier
    table = pd.read_csv(paths.table("heldout_curve", "csv"))
    assert list(dict.fromkeys(table["arm"])) == ["control", "tis"]
    for arm in ("control", "tis"):
        got = table[table["arm"] == arm].set_index("step")
        want = {s: e for s in range(STEPS + 1) if (e := _expected(cfg, arm, s)) is not None}
        assert list(got.index) == sorted(want), arm
        for step, (units, mean, lo, hi) in want.items():
            row = got.loc[step]
            assert row["units"] == units, (arm, step)
            np.testing.assert_allclose(
                [row["mean"], row["low"], row["high"]], [mean, lo, hi], rtol=1e-6, atol=1e-9
            )
    # some intervals reach past [0, 1] before the cut (few bases, spread scores): the cut is exercised
    assert ((table["low"] == 0.0) | (table["high"] == 1.0)).any()
    # the stopped run ends at step 6 with its final checkpoint; no other tis run has a step 6
    assert list(table[table["arm"] == "tis"]["step"]) == [0, 4, 6, 8, 10]


def test_a_history_of_another_checkpoint_is_left_out_and_named(tier):
    _, paths = tier
    md = paths.table("heldout_curve", "md").read_text()
    assert f"{RETRAINED}/eval/heldout_history.json: scored another checkpoint" in md
    table = pd.read_csv(paths.table("heldout_curve", "csv"))
    control = table[table["arm"] == "control"].set_index("step")
    assert control.loc[4, "units"] == BASES  # base 0 keeps seed 0 at step 4, base 1 both its seeds


def test_the_summary_shows_the_curve_and_a_tier_without_kept_checkpoints_has_none(tier, tmp_path):
    cfg, paths = tier
    assert paths.plot("heldout_curve", "png").stat().st_size > 1000
    assert "![heldout_curve](plots/heldout_curve.png)" in paths.summary.read_text()
    plain = _config(tmp_path, keep_every=None)
    assert not report_flags(plain)["history"]
    names = {p.name for p in ReportPaths.for_config(plain).outputs()}
    assert not {"heldout_curve.csv", "heldout_curve.png"} & names
