"""The stability report: per-run numbers, Kaplan-Meier, exact intervals and Fisher tests of the diverged
fractions, the logistic ED50, and the files a tier with a dose axis writes."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fp8rl.report.stability import (
    breaking_dose_table,
    breaking_view,
    kaplan_meier,
    km_median,
    stability_table,
    stability_view,
)
from fp8rl.stats.dose_response import dose_response


def test_kaplan_meier_with_censoring():
    # 4 runs: diverged at 10 and 30, two never diverged (censored at 50)
    t, s = kaplan_meier(np.array([10.0, 30.0, 50.0, 50.0]), np.array([1, 1, 0, 0]))
    assert list(t) == [0.0, 10.0, 30.0] and s == pytest.approx([1.0, 0.75, 0.5])
    assert km_median(np.array([10.0, 30.0, 50.0, 50.0]), np.array([1, 1, 0, 0])) == 30.0
    assert math.isnan(km_median(np.array([10.0, 50.0, 50.0]), np.array([1, 0, 0])))  # < half diverged


def _per_run(rows):
    cols = ["run_id", "algo", "model", "variant", "granularity", "seed", "noise", "diverged", "div_step",
            "div_kind", "last_step", "final_acc", "best_acc", "peak_rel_entropy", "gibberish"]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def _run(variant, noise, seed, div_step=None, acc=0.5):
    gran = "none" if variant == "bf16" else "tensorwise"
    rid = f"grpo/m/{variant}/{gran}/noise{noise:g}/seed{seed}"
    div = div_step is not None
    return [rid, "grpo", "m", variant, gran, seed, noise, div, div_step if div else math.nan,
            "entropy_spike" if div else "", 100.0, acc, acc + 0.1, 2.0 if div else 1.0, 0.01]  # fmt: skip


def test_stability_and_breaking_dose_tables():
    rows = [_run("bf16", 1.0, s) for s in range(3)]
    rows += [_run("fp8", 1.0, s) for s in range(3)]
    rows += [_run("fp8", 2.0, 0, 40), _run("fp8", 2.0, 1)]  # half break at dose 2
    rows += [_run("fp8", 4.0, 0, 20), _run("fp8", 4.0, 1, 30)]
    rows += [_run("fp8_calib", d, s) for d in (1.0, 2.0, 4.0) for s in range(2)]  # never breaks
    table = stability_table(_per_run(rows))
    fp8_4 = table[(table["variant"] == "fp8") & (table["noise"] == 4.0)].iloc[0]
    assert (fp8_4["diverged"], fp8_4["runs"], fp8_4["median_div_step"]) == (2, 2, 20.0)
    assert fp8_4["kinds"] == "entropy_spike: 2" and fp8_4["peak_rel_entropy"] == 2.0
    assert (fp8_4["diverged_low"], fp8_4["diverged_high"]) == pytest.approx((0.158114, 1.0), abs=1e-6)
    bf16 = table[table["variant"] == "bf16"].iloc[0]
    assert bf16["final_acc"] == pytest.approx(0.5) and bf16["final_acc_low"] == pytest.approx(0.5)
    assert bf16["vs"] == "" and math.isnan(bf16["fisher_p"])
    # Fisher: fp8 against bf16 at dose 1, a fixed variant against fp8 at the same dose
    fp8_1 = table[(table["variant"] == "fp8") & (table["noise"] == 1.0)].iloc[0]
    assert (fp8_1["vs"], fp8_1["vs_diverged"], fp8_1["fisher_p"]) == ("bf16", "0/3", 1.0)
    assert (fp8_4["vs"], fp8_4["vs_diverged"]) == ("", "")  # no bf16 run at dose 4
    calib_4 = table[(table["variant"] == "fp8_calib") & (table["noise"] == 4.0)].iloc[0]
    assert (calib_4["vs"], calib_4["vs_diverged"]) == ("fp8", "2/2")
    assert calib_4["fisher_p"] == pytest.approx(stats.fisher_exact([[0, 2], [2, 0]]).pvalue)
    breaking = breaking_dose_table(table).set_index("variant")
    assert list(breaking.index) == ["fp8", "fp8_calib"]  # bf16 has a single dose
    assert breaking.loc["fp8", "diverged_by_dose"] == "0/3, 1/2, 2/2"
    assert breaking.loc["fp8", "fit"] == "quasi-complete separation" and breaking.loc["fp8", "ed50"] == 2.0
    assert breaking.loc["fp8", "ed50_low"] < 2.0 < breaking.loc["fp8", "ed50_high"]
    assert breaking.loc["fp8_calib", "fit"] == "none diverged" and math.isnan(
        breaking.loc["fp8_calib", "ed50"]
    )
    assert breaking.loc["fp8_calib", "ed50_low"] > 1 and breaking.loc["fp8_calib", "ed50_high"] == math.inf
    view = breaking_view(breaking_dose_table(table)).set_index("variant")
    assert view.loc["fp8", "ED50 [95% CI]"].startswith("2.00 [")
    assert (
        view.loc["fp8_calib", "ED50 [95% CI]"].endswith(", inf]")
        and "one-sided" in view.loc["fp8_calib", "fit"]
    )
    cells = stability_view(table).set_index(["variant", "dose"])
    assert cells.loc[("fp8", "4"), "diverged/total"] == "2/2 = 1.00 [0.16, 1.00]"
    assert cells.loc[("fp8", "1"), "vs"] == "bf16 0/3" and cells.loc[("fp8", "1"), "p"] == "1.00"


def test_the_breaking_dose_is_a_logistic_fit_over_all_runs():
    """Overlapping outcomes (a run diverges at dose 2, one survives dose 4): a finite maximum-likelihood
    ED50 from every run, not an interpolation between two doses."""
    rows = (
        [_run("fp8", 1.0, s) for s in range(4)]
        + [_run("fp8", 2.0, 0, 10)]
        + [_run("fp8", 2.0, s) for s in (1, 2, 3)]
    )
    rows += [_run("fp8", 4.0, s, 10) for s in range(3)] + [_run("fp8", 4.0, 3)]
    rows += [_run("fp8", 8.0, s, 10) for s in range(4)]
    fit = breaking_dose_table(stability_table(_per_run(rows))).iloc[0]
    ref = dose_response([1, 2, 4, 8], [0, 1, 3, 4], [4, 4, 4, 4])
    assert fit["fit"] == "logistic" and fit["ed50"] == pytest.approx(ref.ed50)
    assert 2 < fit["ed50"] < 4 and fit["ed50_low"] < fit["ed50"] < fit["ed50_high"] < 8


def test_a_dose_tier_report_writes_the_stability_files(tmp_path):
    """Two runs of a tiny dose-axis config, one diverged at step 3, through build_report."""
    from fp8rl.config import ExperimentConfig
    from fp8rl.report.build import build_report
    from fp8rl.report.paths import ReportPaths
    from fp8rl.run_files import RunDir

    cfg = ExperimentConfig.model_validate(
        {
            "tier": "stress",
            "results_dir": str(tmp_path),
            "models": [{"name": "m", "source": "scratch"}],
            "matrix": {
                "algorithms": ["grpo"],
                "models": ["m"],
                "variants": ["fp8"],
                "seeds": [0],
                "conditions": [
                    {"name": "s1", "fp8": {"noise_scale": 1}},
                    {"name": "s8", "fp8": {"noise_scale": 8}},
                ],
            },  # fmt: skip
        }
    )
    paths = ReportPaths.for_config(cfg)
    assert paths.stability and paths.mechanism
    for spec, div in zip(cfg.runs(), (None, 3), strict=True):
        run = RunDir.of(paths.runs_dir, spec.run_id)
        run.root.mkdir(parents=True)
        lines = [{"step": s, "entropy": 1.0 if not div or s < 3 else 9.0, "acc/mean": 0.3, "reward/mean": 0.3,
                  "gibberish/rate": 0.0, "clip/low_neg": 0.01} for s in range(1, 6)]  # fmt: skip
        run.metrics.write_text("".join(json.dumps(x) + "\n" for x in lines))
        summary = {"run_id": spec.run_id, "status": "diverged" if div else "ok", "reason": "r", "step": 5,
                   "steps_planned": 5, "final": {}}  # fmt: skip
        if div:
            summary["divergence"] = {"kind": "entropy_spike", "step": div, "reason": "entropy spike: x"}
        run.summary.write_text(json.dumps(summary))
    manifest = build_report(cfg)
    for path in paths.outputs():
        assert path.is_file(), path
    assert str(paths.table("stability", "csv")) in manifest["outputs"]
    table = pd.read_csv(paths.table("stability", "csv"))
    assert list(table["diverged"]) == [0, 1] and table["median_div_step"].iloc[1] == 3
    assert "Breaking dose" in paths.html.read_text()
    breaking = paths.table("breaking_dose", "md").read_text()
    assert "profile likelihood" in breaking and "complete separation" in breaking  # 0/1 then 1/1


def test_a_target_kl_axis_has_bf16_as_plain_fp8s_reference_at_every_kl():
    rows = [_run("bf16", 0.0, s) for s in range(3)]
    rows += [_run("fp8", 1e-3, s) for s in range(3)] + [_run("fp8", 1e-1, s, 10 + s) for s in range(3)]
    rows += [_run("fp8_tis", 1e-3, s) for s in range(3)] + [_run("fp8_tis", 1e-1, 0, 20)]
    rows += [_run("fp8_tis", 1e-1, s) for s in (1, 2)]
    table = stability_table(_per_run(rows), "target_kl").set_index(["variant", "noise"])
    assert table.loc[("fp8", 1e-1), "vs_diverged"] == "0/3"  # bf16 (at 0) is its reference at KL 0.1
    assert table.loc[("fp8", 1e-1), "fisher_p"] == pytest.approx(stats.fisher_exact([[3, 0], [0, 3]]).pvalue)
    assert (table.loc[("fp8_tis", 1e-1), "vs"], table.loc[("fp8_tis", 1e-1), "vs_diverged"]) == ("fp8", "3/3")
    # on a dose axis the same rows give plain fp8 no reference away from bf16's own dose
    assert stability_table(_per_run(rows)).set_index(["variant", "noise"]).loc[("fp8", 1e-1), "vs"] == ""
    view = stability_view(table.reset_index(), "target_kl")
    assert "target_kl" in view.columns and "dose" not in view.columns
    breaking = breaking_dose_table(table.reset_index()).set_index("variant")
    assert breaking.loc["fp8", "doses"] == "0.001, 0.1" and "bf16" not in breaking.index


def test_the_shipped_configs_noise_axes(tmp_path):
    """stress sweeps the dose, mechanism varies more than one key, longform sweeps the target KL but has
    no stability report until its fp8 variants join the matrix."""
    from pathlib import Path

    from fp8rl.config_loader import load_config
    from fp8rl.report.paths import noise_axis, report_flags

    config = Path(__file__).resolve().parents[3] / "config"
    results = f"results_dir={tmp_path}"
    assert noise_axis(load_config(config / "stress.yaml", [results])) == "noise_scale"
    assert noise_axis(load_config(config / "mechanism.yaml", [results])) is None
    acceptance_run = load_config(
        config / "longform.yaml", [results, "matrix.variants=[bf16]", "study=null", "failure_search=null"]
    )
    assert noise_axis(acceptance_run) == "target_kl" and report_flags(acceptance_run)["stability"] is False
    assert report_flags(load_config(config / "longform.yaml", [results]))["stability"] is True


def test_a_target_kl_tier_report_writes_the_stability_files_along_the_kl(tmp_path):
    """A bf16 run and a plain fp8 run at two target KLs (the one at 0.1 diverged at step 3), written by
    the trainer's own run-file writers, through build_report."""
    from fp8rl.config import ExperimentConfig
    from fp8rl.report.build import build_report
    from fp8rl.report.paths import ReportPaths
    from fp8rl.run_files import RunDir

    cfg = ExperimentConfig.model_validate(
        {
            "tier": "longform",
            "results_dir": str(tmp_path),
            "models": [{"name": "m", "source": "scratch"}],
            "matrix": {
                "algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8"], "seeds": [0],
                "conditions": [
                    {"name": "kl1e-3", "fp8": {"target_kl": 1e-3}},
                    {"name": "kl1e-1", "fp8": {"target_kl": 1e-1}},
                ],
            },
        }
    )  # fmt: skip
    paths = ReportPaths.for_config(cfg)
    assert paths.stability and paths.mechanism
    divergence = {"grpo/m/fp8/tensorwise/kl1e-1/seed0": 3}
    for spec in cfg.runs():
        run = RunDir.of(paths.runs_dir, spec.run_id)
        run.root.mkdir(parents=True)
        div = divergence.get(spec.run_id)
        for s in range(1, 6):
            run.append_metrics({"step": s, "entropy": 9.0 if div and s >= 3 else 1.0, "acc/mean": 0.3,
                                "reward/mean": 0.3, "gibberish/rate": 0.0, "clip/low_neg": 0.01})  # fmt: skip
        summary = {"run_id": spec.run_id, "status": "diverged" if div else "ok", "reason": "r", "step": 5,
                   "steps_planned": 5, "final": {}}  # fmt: skip
        if div:
            summary["divergence"] = {"kind": "entropy_spike", "step": div, "reason": "entropy spike: x"}
        run.write_summary(summary)
    build_report(cfg)
    for path in paths.outputs():
        assert path.is_file(), path
    table = pd.read_csv(paths.table("stability", "csv"))
    assert list(zip(table["variant"], table["noise"], table["diverged"], strict=True)) == [
        ("bf16", 0.0, 0), ("fp8", 1e-3, 0), ("fp8", 1e-1, 1)
    ]  # fmt: skip
    md = paths.table("stability", "md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| algo"))
    assert "target_kl" in [cell.strip() for cell in header.split("|")] and "| dose" not in header
    assert "The axis is the target KL" in md
    assert "The axis is the target KL" in paths.table("breaking_dose", "md").read_text()
    # SUMMARY.md names the setting by its KL, not as a dose (a KL of 0.1 read as "dose 0")
    page = paths.summary.read_text()
    assert "fp8 at KL 0.1: 1/1" in page and "at dose" not in page


def test_a_target_kl_sweep_s_figures_name_their_axis():
    from fp8rl.report.figures import CAPTIONS, caption

    assert caption("breaking_dose", "noise_scale") == CAPTIONS["breaking_dose"]
    assert caption("breaking_dose", "target_kl").startswith("Fraction of runs diverged vs fp8.target_kl,")
    assert "per variant and fp8.target_kl" in caption("survival", "target_kl")
    assert caption("study_endpoint", "target_kl") == CAPTIONS["study_endpoint"]  # not a stability figure
