"""A real tiny study tier (bf16 and plain FP8 at two noise doses, three seeds, through the reference
trainer on the tiny tier's base) is reported, and its planned and exploratory contrasts, the comparison
intervals and the control check are recomputed from `tables/endpoints.csv` alone, with scipy, and agree
with the published tables; `fp8rl publish` carries the endpoints and the control.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

SEEDS = [0, 1, 2]
STUDY = {
    "arms": {
        "bf16": "grpo/tiny/bf16/none/none",
        "fp8_s1": "grpo/tiny/fp8/tensorwise/s1",
        "fp8_s2": "grpo/tiny/fp8/tensorwise/s2",
    },
    "endpoint": {"metric": "reward/mean", "from_frac": 0.5},
    "min_effect": 0.1,
    "planning_sd": 0.05,
    "min_seeds": len(SEEDS),
    "planned": [
        {"name": "s1_vs_bf16", "arm": "fp8_s1", "reference": "bf16"},
        {"name": "s2_vs_bf16", "arm": "fp8_s2", "reference": "bf16"},
    ],
    "exploratory": [{"name": "s2_vs_s1", "arm": "fp8_s2", "reference": "fp8_s1"}],
}
OVERRIDES = {
    "matrix.algorithms": ["grpo"],
    "matrix.variants": ["bf16", "fp8"],
    "matrix.granularities": ["tensorwise"],
    "matrix.variant_granularities": {},
    "matrix.seeds": SEEDS,
    "matrix.conditions": [
        {"name": "s1", "fp8": {"noise_scale": 1.0}},
        {"name": "s2", "fp8": {"noise_scale": 2.0}},
    ],
    "schedule.steps": 4,
    "eval": {"lm_eval_tasks": [], "agent": []},
    "study": STUDY,
}


@pytest.fixture(scope="module")
def study_tier(tier, tmp_path_factory):
    """(config, report root) of the tiny study tier, trained and reported."""
    import torch

    from fp8rl.config_loader import load_config
    from fp8rl.engine.trainer import Trainer
    from fp8rl.report.build import build_report
    from fp8rl.report.paths import ReportPaths
    from fp8rl.run_files import runs_dir

    root, _, write_config = tier
    tmp = tmp_path_factory.mktemp("study")
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    cfg = load_config(write_config(tmp / "study.yaml", OVERRIDES | {"results_dir": str(tmp / "results")}))
    for run in cfg.runs():
        out = runs_dir(cfg.results_dir, cfg.tier) / run.run_id
        Trainer(cfg, run, base_dir=root / "base" / "tiny", data_dir=root / "data", out_dir=out,
                progress=False).run()  # fmt: skip
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)
    build_report(cfg)
    return cfg, ReportPaths.for_config(cfg)


def _close(got, want, what):
    assert np.isfinite(np.asarray(want, float)).all(), what  # NaN == NaN would pass unseen
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float), rtol=2e-5, atol=1e-9,
                               err_msg=what)  # fmt: skip


def _t(values, bounds=(-math.inf, math.inf)):
    """Mean and 95 % t-interval of `values` (scipy), cut to `bounds`."""
    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    mean = x.mean()
    if x.size < 2 or x.std(ddof=1) == 0:
        return mean, (np.nan, np.nan) if x.size < 2 else (mean, mean)
    lo, hi = stats.t.interval(0.95, x.size - 1, loc=mean, scale=stats.sem(x))
    return mean, (max(lo, bounds[0]), min(hi, bounds[1]))


def _welch(a, b, bounds=(-math.inf, math.inf)):
    res = stats.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.95)
    return np.mean(a) - np.mean(b), (max(ci.low, bounds[0]), min(ci.high, bounds[1])), res.pvalue


def test_the_planned_contrasts_recompute_from_endpoints_csv(study_tier):
    cfg, paths = study_tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    assert len(ends) == len(cfg.runs()) and set(ends["status"]) <= {"ok", "diverged"}
    assert ends["endpoint"].notna().all() and (ends["base"] == "tiny").all()  # one shared base
    arms = ends.assign(arm=ends["arm"].fillna("").str.split(";")).explode("arm")
    planned = pd.read_csv(paths.table("planned", "csv")).set_index("contrast")
    p = {}
    for c in STUDY["planned"]:
        a = arms[arms["arm"] == c["arm"]]["endpoint"].to_numpy()
        b = arms[arms["arm"] == c["reference"]]["endpoint"].to_numpy()
        assert len(a) == len(b) == len(SEEDS)
        diff, (lo, hi), p[c["name"]] = _welch(a, b)
        row = planned.loc[c["name"]]
        _close(
            [row["difference"], row["low"], row["high"], row["p"]], [diff, lo, hi, p[c["name"]]], c["name"]
        )
    # Holm over the planned family
    order = sorted(p, key=p.get)
    running = 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[name]))
        _close(planned.loc[name, "p_adjusted"], running, f"{name} p_adjusted")
    exploratory = pd.read_csv(paths.table("exploratory", "csv")).set_index("contrast")
    a = arms[arms["arm"] == "fp8_s2"]["endpoint"].to_numpy()
    b = arms[arms["arm"] == "fp8_s1"]["endpoint"].to_numpy()
    diff, (lo, hi), pval = _welch(a, b)
    _close(exploratory.loc["s2_vs_s1", ["difference", "low", "high", "p"]], [diff, lo, hi, pval], "s2_vs_s1")


def test_the_comparison_intervals_recompute_from_endpoints_csv(study_tier):
    _, paths = study_tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    comp = pd.read_csv(paths.table("comparison", "csv"))
    used = ends[ends["status"].isin(["ok", "diverged"])]
    ref = used[used["variant"] == "bf16"]
    checked = 0
    for _, r in comp.iterrows():
        runs = used[used["variant"] == r["variant"]]
        if r["variant"] != "bf16":
            runs = runs[(runs["granularity"] == r["granularity"]) & (runs["condition"] == r["condition"])]
        for col, bounds in (("clip_low_neg", (0, 1)), ("mismatch_kl_k3", (0, math.inf))):
            mean, (lo, hi) = _t(runs[col], bounds)
            _close([r[f"{col} ci_low"], r[f"{col} ci_high"]], [lo, hi], f"{r['variant']} {col}")
        _close(r["final_reward"], runs["final_reward"].mean(), "final_reward")
        _close(r["peak_entropy_rel"], runs["peak_entropy_rel"].mean(), "peak_entropy_rel")
        if r["variant"] == "bf16":
            continue
        diff, (lo, hi), _ = _welch(runs["clip_low_neg"], ref["clip_low_neg"], (-1, 1))
        _close([r["clip_low_neg delta"], r["clip_low_neg delta_ci_low"], r["clip_low_neg delta_ci_high"]],
               [diff, lo, hi], "clip_low_neg delta")  # fmt: skip
        for col in ("excess_clip", "phantom_low_neg", "phantom_missed_neg"):
            bounds = (-1, 1) if col == "excess_clip" else (0, 1)
            mean, (lo, hi) = _t(runs[col], bounds)
            _close([r[col], r[f"{col} ci_low"], r[f"{col} ci_high"]], [mean, lo, hi], f"{r['variant']} {col}")
        checked += 1
    assert checked == 2  # fp8 at s1 and at s2


def test_the_control_check_recomputes_and_is_in_report_json(study_tier):
    _, paths = study_tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    bf16 = ends[ends["variant"] == "bf16"]
    control = pd.read_csv(paths.table("control", "csv"))
    assert len(control) == 1 and control.loc[0, "unit"] == "seed (one base)"
    mean, (lo, hi) = _t(bf16["reward_rise"])
    _close(control.loc[0, ["rise", "low", "high"]], [mean, lo, hi], "control rise")
    want = "learned" if lo > 0 else ("fell" if hi < 0 else "flat")
    assert control.loc[0, "verdict"] == want
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["control"]["groups"][0]["verdict"] == want
    assert manifest["control"]["comparison_void"] is (want != "learned")
    void = "the comparison is void: the bf16 control did not learn"
    for table in ("comparison", "planned", "exploratory", "mechanism"):
        assert (void in paths.table(table, "md").read_text().lower()) is (want != "learned"), table
    # the windows: steps 1 (first 10 % of 4 steps) and 4 (last 20 %)
    metrics = [
        json.loads(line) for line in (paths.runs_dir / bf16.iloc[0]["run_id"] / "metrics.jsonl").open()
    ]
    _close(bf16.iloc[0]["reward_first"], metrics[0]["reward/mean"], "reward_first")
    _close(bf16.iloc[0]["reward_last"], metrics[3]["reward/mean"], "reward_last")


def test_publish_carries_the_endpoints_and_the_control(study_tier, tmp_path):
    from fp8rl.publication.publish import publish_tier

    cfg, paths = study_tier
    dest = publish_tier(cfg.tier, cfg.results_dir, cfg, dest=tmp_path / "published" / cfg.tier)
    manifest = json.loads((dest / "report.json").read_text())
    for name in ("endpoints", "control"):
        for ext in ("csv", "md"):
            rel = f"tables/{name}.{ext}"
            assert (dest / rel).read_bytes() == paths.table(name, ext).read_bytes()
            assert rel in manifest["files"]


def test_the_arms_stability_and_mechanism_numbers_recompute_from_endpoints_csv(study_tier):
    _, paths = study_tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    arms = pd.read_csv(paths.table("arms", "csv")).set_index("arm")
    for arm in STUDY["arms"]:
        mean, (lo, hi) = _t(ends[ends["arm"] == arm]["endpoint"])
        _close(arms.loc[arm, ["endpoint", "low", "high"]], [mean, lo, hi], f"arm {arm}")
    # the stability table (the conditions are a dose axis): counts with exact intervals, seed means
    stab = pd.read_csv(paths.table("stability", "csv"))
    used = ends[ends["status"].isin(["ok", "diverged"])]
    for _, r in stab.iterrows():
        g = used[(used["variant"] == r["variant"]) & (used["noise"] == r["noise"])]
        if r["variant"] != "bf16":
            g = g[g["granularity"] == r["granularity"]]
        k = int((g["status"] == "diverged").sum())
        ci = stats.binomtest(k, len(g)).proportion_ci(0.95, method="exact")
        assert (r["runs"], r["diverged"]) == (len(g), k)
        _close([r["diverged_low"], r["diverged_high"]], [ci.low, ci.high], "diverged interval")
        for col, values, bounds in (
            ("final_acc", g["final_acc"], (0, 1)),
            ("gibberish", g["gibberish_rate"], (0, 1)),
            ("peak_rel_entropy", g["peak_entropy_rel"], (0, math.inf)),  # after the baseline steps
        ):
            mean, (lo, hi) = _t(values, bounds)
            _close(r[col], mean, f"{r['variant']} {col}")
            if np.isfinite(r[f"{col}_low"]):
                _close([r[f"{col}_low"], r[f"{col}_high"]], [lo, hi], f"{r['variant']} {col} interval")
    # the mechanism table's excess p and its Holm adjustment over one dose's granularities
    mech = pd.read_csv(paths.table("mechanism", "csv"))
    for _, r in mech.iterrows():
        g = used[(used["variant"] == r["variant"]) & (used["condition"] == r["condition"])]
        g = g[g["granularity"] == r["granularity"]]
        want = stats.ttest_1samp(g["excess_clip"], 0.0).pvalue
        if np.isnan(want):  # every seed's excess the same (0 on some kernel paths' runs): no test, no p
            assert g["excess_clip"].nunique() == 1 and np.isnan(r["excess_clip p"]), (g["excess_clip"], r)
            continue
        _close(r["excess_clip p"], want, "excess p")
        assert r["excess_clip p_holm"] == pytest.approx(r["excess_clip p"])  # one granularity: a family of 1


def test_the_summary_page_says_what_the_tables_say(study_tier, tmp_path):
    """SUMMARY.md quotes the control and every planned contrast with the numbers of their tables, says
    the comparison is void exactly when the control did not learn, links only tables that exist, and is
    hashed by report.json and published with the tables."""
    from fp8rl.publication.publish import publish_tier
    from fp8rl.report.formats import interval, num

    cfg, paths = study_tier
    page = paths.summary.read_text()
    control = pd.read_csv(paths.table("control", "csv")).iloc[0]
    assert f"rise {interval(control['rise'], control['low'], control['high'], 3)}" in page
    assert f"**{control['verdict']}**" in page
    void = control["verdict"] != "learned"
    assert ("The comparison is void" in page) == void
    for r in pd.read_csv(paths.table("planned", "csv")).to_dict("records"):
        assert f"{r['contrast']}: {r['arm']} − {r['reference']} = " in page
        assert interval(r["difference"], r["low"], r["high"], 3) in page
        assert f"p (adjusted) = {num(r['p_adjusted'], 3)}: {r['decision']}" in page
    for link in [line.split("](")[1].split(")")[0] for line in page.splitlines() if line.startswith("- [")]:
        assert (paths.root / link).is_file(), link
    assert "tables/stability.md" in page and "tables/planned.md" in page
    assert f"- {len(cfg.runs())} runs (" in page
    manifest = json.loads(paths.manifest.read_text())
    assert "SUMMARY.md" in manifest["files"]
    dest = publish_tier(cfg.tier, cfg.results_dir, cfg, dest=tmp_path / "published" / cfg.tier)
    assert (dest / "SUMMARY.md").read_text() == page
