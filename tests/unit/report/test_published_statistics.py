"""The published tables' statistics rebuild, byte for byte, from the published per-run endpoints.

`endpoints.csv` carries the one value per run that every interval and test aggregates (fp8rl.report.
endpoints). Recomputing from it with today's fp8rl.stats gives the same bytes as the published
`planned.csv`, `exploratory.csv`, `control.csv`, the arms' intervals and the stability table's exact
count intervals and Fisher tests: moving a statistic onto scipy did not move a published number. The
clipping tier's contrasts (the base as the unit) are also recomputed without fp8rl: base means from
endpoints.csv, scipy's paired t-test, Holm by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from fp8rl.config_loader import load_config
from fp8rl.report.control import control_table
from fp8rl.report.planned import contrasts_table
from fp8rl.stats.exact import clopper_pearson, fisher_p
from fp8rl.stats.intervals import t_interval

REPO = Path(__file__).resolve().parents[3]
PUBLISHED = REPO / "results" / "published"
FLOAT = "%.6g"  # what the report writes its tables with (fp8rl.report.build)


def published(tier: str, table: str) -> pd.DataFrame:
    return pd.read_csv(PUBLISHED / tier / "tables" / f"{table}.csv", keep_default_na=False, na_values=[""])


def csv_bytes(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format=FLOAT)


def study_endpoints(tier: str) -> pd.DataFrame:
    """endpoints.csv with one row per (arm, run): a run in several arms (`;`-joined) counts in each."""
    ep = published(tier, "endpoints")
    ep = ep[ep["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")
    return ep[["arm", "run_id", "base", "status", "endpoint"]].reset_index(drop=True)


def tier_config(tier: str):
    """The tier's config, as long as its registered study is the one the publication answers (the same
    planned contrasts, arms and references, unit and multiplicity as `planned.csv`); a config changed
    elsewhere (a secondary endpoint, a disclosed setting) still rebuilds the registered tables."""
    cfg = load_config(str(REPO / "config" / f"{tier}.yaml"), [])
    planned = published(tier, "planned")
    registered = [(c.name, c.arm, c.reference) for c in cfg.study.planned]
    answered = list(zip(planned["contrast"], planned["arm"], planned["reference"], strict=True))
    if registered != answered or (cfg.study.unit == "base") != ("bases" in planned):
        pytest.skip(f"config/{tier}.yaml registers another study than results/published/{tier} answers")
    return cfg


@pytest.fixture(scope="module")
def learn_config():
    return tier_config("learn")


@pytest.mark.parametrize("tier", ["learn", "clipping"])
@pytest.mark.parametrize("planned", [True, False], ids=["planned", "exploratory"])
def test_contrasts_rebuild_from_the_published_endpoints(tier, planned):
    table = contrasts_table(study_endpoints(tier), tier_config(tier).study, planned=planned)
    name = "planned" if planned else "exploratory"
    assert csv_bytes(table) == (PUBLISHED / tier / "tables" / f"{name}.csv").read_text()


def test_the_clipping_contrasts_are_paired_t_tests_over_base_means():
    """Without fp8rl's statistics: each arm's base means, scipy's paired t-test between two arms over the
    six bases, Holm over the planned pair; every published figure matches to the written precision."""
    study = tier_config("clipping").study
    ep = study_endpoints("clipping")
    ep = ep[ep["endpoint"].notna()]
    means = ep.groupby(["base", "arm"])["endpoint"].mean().unstack("arm")
    assert len(means) == 6 and not means.isna().any().any()  # six bases, every arm on each
    p = {}
    for planned, contrasts in ((True, study.planned), (False, study.exploratory)):
        table = published("clipping", "planned" if planned else "exploratory").set_index("contrast")
        assert sorted(table.index) == sorted(c.name for c in contrasts)
        for c in contrasts:
            res = stats.ttest_rel(means[c.arm], means[c.reference])
            ci = res.confidence_interval(0.95)
            diff = (means[c.arm] - means[c.reference]).mean()
            row = table.loc[c.name]
            assert row["bases"] == 6 and row["df"] == 5
            ours = [diff, ci.low, ci.high, res.pvalue]
            assert [FLOAT % v for v in ours] == [FLOAT % row[k] for k in ("difference", "low", "high", "p")]
            if planned:
                p[c.name] = res.pvalue
    running = 0.0
    for rank, name in enumerate(sorted(p, key=p.get)):
        running = max(running, min(1.0, (len(p) - rank) * p[name]))
        assert (
            FLOAT % running
            == FLOAT % published("clipping", "planned").set_index("contrast").loc[name, "p_adjusted"]
        )


def test_arm_intervals_rebuild_from_the_published_endpoints():
    arms = published("learn", "arms")
    ep = study_endpoints("learn")
    for r in arms.itertuples(index=False):
        ci = t_interval(ep[ep["arm"] == r.arm]["endpoint"])
        assert ci.n == r.n
        for ours, theirs in ((ci.estimate, r.endpoint), (ci.low, r.low), (ci.high, r.high)):
            assert FLOAT % ours == FLOAT % theirs


def test_held_out_arm_intervals_are_base_mean_t_intervals_cut_to_0_1():
    """The longform tier's arms (a held-out score, the base as the unit), without fp8rl's statistics:
    each base's mean over its runs, scipy's t-interval over the bases, cut to [0, 1]; two arms' intervals
    reach below 0 before the cut, so the cut is what the published bounds show."""
    arms = published("longform", "arms")
    ep = study_endpoints("longform")
    cut = 0
    for r in arms.itertuples(index=False):
        means = ep[ep["arm"] == r.arm].dropna(subset=["endpoint"]).groupby("base")["endpoint"].mean()
        if means.nunique() == 1:  # every base alike (e.g. all at 0): a zero-width interval, not scipy's NaN
            low = high = means.iloc[0]
        else:
            low, high = stats.t.interval(0.95, len(means) - 1, loc=means.mean(), scale=stats.sem(means))
        cut += low < 0
        assert (r.bases, FLOAT % r.endpoint) == (len(means), FLOAT % means.mean())
        assert (FLOAT % r.low, FLOAT % r.high) == (FLOAT % max(low, 0.0), FLOAT % min(high, 1.0)), r.arm
    assert cut == 2


@pytest.mark.parametrize("tier", ["smoke", "ci", "learn", "mechanism", "clipping"])
def test_control_rebuilds_from_the_published_endpoints(tier):
    ep = published(tier, "endpoints")
    text = (PUBLISHED / tier / "tables" / "control.csv").read_text()
    assert csv_bytes(control_table(ep)) == text


def test_count_intervals_and_fisher_tests_rebuild_from_the_published_counts():
    stab = published("learn", "stability")
    for r in stab.itertuples(index=False):
        low, high = clopper_pearson(int(r.diverged), int(r.runs))
        assert (FLOAT % low, FLOAT % high) == (FLOAT % r.diverged_low, FLOAT % r.diverged_high)
        if isinstance(r.vs, str):
            k, n = (int(v) for v in r.vs_diverged.split("/"))
            ours = fisher_p(int(r.diverged), int(r.runs), k, n)
            assert FLOAT % ours == FLOAT % r.fisher_p
        else:
            assert math.isnan(r.fisher_p)


@pytest.mark.parametrize("metric", ["sampled_reward", "greedy_acc"])
def test_the_secondary_analysis_rebuilds_with_scipy_from_the_published_endpoints(metric):
    """The learn tier's secondary analysis on the held-out bf16 endpoint (tables/secondary.csv), without
    fp8rl: each registered contrast is Welch's t over the runs' `heldout/{metric}` in endpoints.csv
    (scipy), the planned family Holm-adjusted by hand, and the control's gain the mean of
    `heldout_gain_{metric}` over the bf16 runs with a Student t-interval."""
    cfg = tier_config("learn")
    secondary = published("learn", "secondary")
    rows = secondary[secondary["endpoint"] == f"heldout/{metric}"].set_index("contrast")
    ep = published("learn", "endpoints")
    ep = ep[ep["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")

    def values(arm: str):
        return ep[ep["arm"] == arm][f"heldout/{metric}"].dropna().to_numpy(dtype=float)

    planned_p = []
    for family, contrasts in (("planned", cfg.study.planned), ("exploratory", cfg.study.exploratory)):
        for c in contrasts:
            a, b = values(c.arm), values(c.reference)
            t = stats.ttest_ind(a, b, equal_var=False)
            ci = t.confidence_interval(0.95)
            r = rows.loc[c.name]
            assert r["family"] == family and r["n_arm"] == len(a) and r["n_reference"] == len(b)
            # abs: the endpoints are printed to 10 significant digits, so a difference near 0 (bf16_floor
            # against bf16) carries their rounding, ~1e-10, not a relative error
            assert r["difference"] == pytest.approx(a.mean() - b.mean(), rel=1e-8, abs=1e-9)
            assert (r["low"], r["high"]) == pytest.approx((ci.low, ci.high), rel=1e-6)
            assert r["p"] == pytest.approx(t.pvalue, rel=1e-6)
            if family == "planned":
                planned_p.append((c.name, t.pvalue))
    m = len(planned_p)
    running = 0.0
    for i, (name, p) in enumerate(sorted(planned_p, key=lambda x: x[1])):
        running = max(running, min(1.0, (m - i) * p))
        assert rows.loc[name, "p_adjusted"] == pytest.approx(running, rel=1e-6)
    gain = (
        ep[ep["variant"] == "bf16"].drop_duplicates("run_id")[f"heldout_gain_{metric}"].to_numpy(dtype=float)
    )
    control = rows.loc["bf16_gain_over_base"]
    half = stats.t.ppf(0.975, len(gain) - 1) * gain.std(ddof=1) / math.sqrt(len(gain))
    assert control["difference"] == pytest.approx(gain.mean(), rel=1e-8)
    assert (control["low"], control["high"]) == pytest.approx(
        (gain.mean() - half, gain.mean() + half), rel=1e-6
    )
    # the control learned on the held-out endpoint too, as the study assumes (its interval above 0)
    assert control["low"] > 0
