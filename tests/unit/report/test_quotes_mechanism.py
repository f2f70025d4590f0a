"""The verdict wording says no more than the intervals: "within 20 % of bf16" only where the interval of
the difference lies inside ±20 %, "×N per doubling" only from a dose whose excess is shown, and an excess
"shown" over the granularities at one dose only after Holm over them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fp8rl.quotes.clipping import growth, shown, within_20
from fp8rl.stats.intervals import p_from_interval
from fp8rl.stats.multiplicity import holm


def _clip(delta_low: float, delta_high: float, bf16: float = 0.01) -> tuple[pd.Series, pd.Series]:
    calib = pd.Series({"clip_low_neg": bf16, "clip_low_neg delta_ci_low": delta_low * bf16,
                       "clip_low_neg delta_ci_high": delta_high * bf16})  # fmt: skip
    return calib, pd.Series({"clip_low_neg": bf16})


@pytest.mark.parametrize(
    ("low", "high", "start"),
    [
        (-0.61, 0.52, "not shown within 20 % of bf16: its Δ is −61 % to +52 % of bf16's"),  # issue 42's
        (-0.15, 0.12, "within 20 % of bf16: its Δ is −15 % to +12 % of bf16's"),
        (0.25, 0.90, "more than 20 % from bf16"),
        (-0.90, -0.30, "more than 20 % from bf16"),
        (math.nan, math.nan, "no interval"),
        (0.05, 0.05, "no interval"),  # zero width: seeds that all agree
    ],
)
def test_within_20_percent_only_where_the_interval_lies_inside(low, high, start):
    assert within_20(*_clip(low, high)).startswith(start)


def _doses(values: list[tuple[float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"noise_scale": 2.0**i, "excess_clip": e, "excess_clip ci_low": lo, "excess_clip ci_high": hi}
         for i, (e, lo, hi) in enumerate(values)]
    )  # fmt: skip


def test_no_ratio_per_doubling_from_a_dose_whose_excess_interval_includes_0():
    # issue 42's e5m2 series: +0.72 pp at s = 1 with an interval including 0, then +4.10 and +10.35
    text = growth(_doses([(0.0072, -0.001, 0.015), (0.041, 0.02, 0.06), (0.1035, 0.08, 0.12)]))
    assert "×5.7" not in text and text.startswith("×2.5 per doubling")
    assert "none from s = 1: the excess at s = 1 has an interval including 0" in text
    both = growth(_doses([(0.01, 0.005, 0.015), (0.03, 0.02, 0.04), (0.12, 0.1, 0.14)]))
    assert both.startswith("×3.0 to ×4.0 per doubling") and "none" not in both
    flat = growth(_doses([(0.01, 0.01, 0.01), (0.03, 0.02, 0.04)]))  # a zero-width interval shows nothing
    assert "no ratio per doubling" in flat
    none = growth(_doses([(0.001, -0.01, 0.012), (0.002, -0.01, 0.014)]))
    assert "no ratio per doubling" in none and "×" not in none


def test_p_from_interval_is_the_one_sample_t_test():
    seeds = np.array([0.004, 0.009, 0.011])
    lo, hi = stats.t.interval(0.95, 2, loc=seeds.mean(), scale=stats.sem(seeds))
    assert p_from_interval(seeds.mean(), lo, hi, 3) == pytest.approx(stats.ttest_1samp(seeds, 0).pvalue)
    assert math.isnan(p_from_interval(0.01, math.nan, math.nan, 3))


def test_shown_adjusts_with_holm_over_the_granularities_given():
    # five granularities, three seeds each; two have unadjusted intervals excluding 0 but fail Holm
    seeds = {
        "tensorwise": [0.001, 0.009, 0.006],
        "delayed": [0.0050, 0.0052, 0.0051],  # p ≈ 0.0001: survives Holm
        "rowwise": [0.004, 0.007, 0.006],  # p ≈ 0.023: its interval excludes 0, Holm (× 4) does not
        "blockwise": [-0.002, 0.004, 0.003],
        "mxfp8": [-0.001, 0.003, 0.002],
    }
    rows = []
    for g, x in seeds.items():
        x = np.asarray(x)
        lo, hi = stats.t.interval(0.95, 2, loc=x.mean(), scale=stats.sem(x))
        rows.append({"granularity": g, "seeds": 3, "excess_clip": x.mean(), "excess_clip ci_low": lo,
                     "excess_clip ci_high": hi, "p": stats.ttest_1samp(x, 0).pvalue})  # fmt: skip
    table = pd.DataFrame(rows)
    unadjusted = sorted(table[table["excess_clip ci_low"] > 0]["granularity"])
    want = sorted(g for g, p in zip(table["granularity"], holm(table["p"].tolist()), strict=True) if p < 0.05)
    assert want == ["delayed"] and len(unadjusted) > len(want)
    assert shown(table.drop(columns="p")) == want  # tables published before p_holm: p from the intervals
    with_column = table.assign(**{"excess_clip p_holm": holm(table["p"].tolist())})
    assert shown(with_column) == want


def test_a_verdict_block_starts_void_where_the_published_control_did_not_learn(tmp_path):
    import shutil
    from pathlib import Path

    from fp8rl.quotes.clipping import smoke_verdicts
    from fp8rl.quotes.registry import optional_table
    from fp8rl.report.findings import void_line

    repo = Path(__file__).resolve().parents[3]
    tables = tmp_path / "smoke" / "tables"
    tables.mkdir(parents=True)
    shutil.copy(repo / "results/published/smoke/tables/comparison.csv", tables)
    before = smoke_verdicts(tmp_path)
    assert void_line(optional_table(tmp_path, "smoke", "control")) is None  # no control table: nothing said
    row = {"algo": "grpo", "model": "tiny", "condition": None, "runs": 3, "used": 3, "diverged": 0,
           "unit": "base", "n": 3, "reward_first": 0.42, "reward_last": 0.32}  # fmt: skip
    for verdict, rise, low, high in (("learned", 0.2, 0.1, 0.3), ("fell", -0.1, -0.15, -0.05)):
        control = pd.DataFrame([row | {"rise": rise, "low": low, "high": high, "verdict": verdict}])
        control.to_csv(tables / "control.csv", index=False)
        text = smoke_verdicts(tmp_path)
        if verdict == "learned":
            assert text == before
        else:
            assert text.startswith(
                "- **The comparison is void: the bf16 control did not learn** (grpo/tiny: fell"
            )
            assert text.endswith(before)
    # no control run finished: said so (control.UNCHECKED), not that the control did not learn
    never = {"n": 0, "used": 0, "rise": float("nan"), "low": float("nan"), "high": float("nan")}
    pd.DataFrame([row | never | {"verdict": "no interval"}]).to_csv(tables / "control.csv", index=False)
    assert smoke_verdicts(tmp_path).startswith(
        "- **The comparison is void: no bf16 control run finished, so whether it learns is unknown** "
        "(grpo/tiny: no interval, rise n/a; `tables/control.csv`).\n"
    )
