"""The stability report: per-run numbers, Kaplan-Meier, exact intervals and Fisher tests of the diverged
fractions, the logistic ED50, and the files a tier with a dose axis writes."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fp8rl.report.binomial import dose_response
from fp8rl.report.stability import (
    breaking_dose_table,
    breaking_view,
    kaplan_meier,
    km_median,
    stability_table,
    stability_view,
)


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
