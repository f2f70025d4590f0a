"""`study.unit: base`: on a synthetic tier of 3 bases x 2 RL seeds each (`sft.bases`), with the calib
override as an arm, written by the real writers (RunDir, build_summary) and reported by `build_report`,
every planned and exploratory contrast, and the arms table, recompute from `tables/endpoints.csv` alone:
base means, a paired t-test over bases (scipy.stats.ttest_rel), Holm, and the power of that test
(simulated here, computed exactly by the report)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from report_fixtures import REPO, metrics_row
from scipy import stats

from fp8rl.config_loader import load_config
from fp8rl.report.build import build_report
from fp8rl.report.paths import ReportPaths
from fp8rl.run_files import RunDir, runs_dir
from fp8rl.run_records import build_summary

STEPS = 10
SEEDS = [0, 1, 2, 3, 4, 5]
BASES = 3
CONDITIONS = [
    {"name": "s4", "fp8": {"noise_scale": 4.0}},
    {"name": "s4_fixed", "fp8": {"noise_scale": 4.0}, "calib": {"upper": "fixed"}, "variants": ["fp8_tis_calib"]},
]  # fmt: skip
STUDY = {
    "unit": "base",
    "arms": {
        "bf16": "grpo/tiny/bf16/none/none",
        "fp8": "grpo/tiny/fp8/tensorwise/s4",
        "tis": "grpo/tiny/fp8_tis/tensorwise/s4",
        "calib": "grpo/tiny/fp8_tis_calib/tensorwise/s4",
        "calib_fixed": "grpo/tiny/fp8_tis_calib/tensorwise/s4_fixed",
    },
    "endpoint": {"metric": "reward/mean", "from_frac": 0.5},
    "min_effect": 0.05,
    "planning_sd": 0.03,
    "min_seeds": BASES,
    "planned": [
        {"name": "calib_vs_tis", "arm": "calib", "reference": "tis"},
        {"name": "fixed_vs_calib", "arm": "calib_fixed", "reference": "calib"},
        {"name": "tis_vs_bf16", "arm": "tis", "reference": "bf16"},
    ],
    "exploratory": [{"name": "fp8_vs_bf16", "arm": "fp8", "reference": "bf16"}],
}
BASE_LEVEL = [0.2, 0.35, 0.5]  # the bases differ more than the arms: what pairing within base removes
ARM_SHIFT = {("bf16", None): 0.0, ("fp8", "s4"): -0.15, ("fp8_tis", "s4"): -0.08,
             ("fp8_tis_calib", "s4"): -0.02, ("fp8_tis_calib", "s4_fixed"): -0.03}  # fmt: skip
FAILED = "grpo/tiny/fp8_tis_calib/tensorwise/s4/seed3"  # base 0 keeps one calib seed: 1-2 seeds per base


def _reward(spec, step: int) -> float:
    cond = spec.condition if spec.condition != "none" else None
    jitter = 0.03 * math.sin(7 * spec.seed + 3 * len(spec.run_id))
    return BASE_LEVEL[spec.seed % BASES] + ARM_SHIFT[(spec.variant, cond)] + jitter + 0.002 * step


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("base_unit")
    raw = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    raw |= {"results_dir": str(tmp / "results"), "study": STUDY, "eval": {"lm_eval_tasks": [], "agent": []}}
    raw["schedule"]["steps"] = STEPS
    raw["sft"]["bases"] = BASES
    raw["matrix"] = {
        "algorithms": ["grpo"],
        "models": ["tiny"],
        "variants": ["bf16", "fp8", "fp8_tis", "fp8_tis_calib"],
        "granularities": ["tensorwise"],
        "seeds": SEEDS,
        "conditions": CONDITIONS,
    }
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg = load_config(path)
    for spec in cfg.runs():
        run = RunDir.of(runs_dir(cfg.results_dir, cfg.tier), spec.run_id)
        run.claim(spec.run_id)
        run.write_config(cfg.model_dump(mode="json"))
        failed = spec.run_id == FAILED
        n = 2 if failed else STEPS
        for step in range(1, n + 1):
            run.append_metrics(metrics_row(spec, step) | {"reward/mean": _reward(spec, step)})
        base = {"name": cfg.base_of(spec.model, spec.seed), "seed": spec.seed % BASES, "sft_seed": None}
        summary = build_summary(
            spec.run_id, "failed" if failed else "ok", "RuntimeError: boom" if failed else None, n, STEPS,
            {"reward/mean": _reward(spec, n)}, {"git_commit": "abc123", "packages": {}, "machine": {}},
            base=base,
        )  # fmt: skip
        run.write_summary(summary)
    build_report(cfg)
    return cfg, ReportPaths.for_config(cfg)


def _close(got, want, what):
    want = np.asarray(want, float)
    assert np.isfinite(want).all(), what
    np.testing.assert_allclose(np.asarray(got, float), want, rtol=2e-5, atol=1e-9, err_msg=what)


def _base_means(ends: pd.DataFrame, arm: str) -> pd.DataFrame:
    sub = ends[(ends["arm"] == arm) & ends["endpoint"].notna()]
    return sub.groupby("base")["endpoint"].agg(["mean", "size"])


def _paired_power(effect, sd, n, alpha, draws=40_000):
    rng = np.random.default_rng(1)
    d = rng.normal(effect, sd, (draws, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, n - 1)))


def test_the_paired_contrasts_recompute_from_endpoints_csv(tier):
    cfg, paths = tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    assert sorted(ends["base"].unique()) == [f"tiny/seed{b}" for b in range(BASES)]
    for r in ends.itertuples():
        assert r.base == f"tiny/seed{r.seed % BASES}"
    assert "sft.bases = 3: seed s starts from base s % 3" in paths.table("endpoints", "md").read_text()
    ends = ends.assign(arm=ends["arm"].fillna("").str.split(";")).explode("arm")
    planned = pd.read_csv(paths.table("planned", "csv")).set_index("contrast")
    exploratory = pd.read_csv(paths.table("exploratory", "csv")).set_index("contrast")
    alpha = cfg.study.alpha / len(STUDY["planned"])  # Holm: the power's level
    p = {}
    for c, table in [
        *((c, planned) for c in STUDY["planned"]),
        *((c, exploratory) for c in STUDY["exploratory"]),
    ]:
        a, b = _base_means(ends, c["arm"]), _base_means(ends, c["reference"])
        assert list(a.index) == list(b.index) and len(a) == BASES
        res = stats.ttest_rel(a["mean"], b["mean"])
        ci = res.confidence_interval(0.95)
        d = (a["mean"] - b["mean"]).to_numpy()
        row = table.loc[c["name"]]
        _close([row["difference"], row["low"], row["high"], row["p"], row["df"]],
               [d.mean(), ci.low, ci.high, res.pvalue, BASES - 1], c["name"])  # fmt: skip
        assert row["bases"] == BASES
        assert row["n_arm"] == a["size"].sum() and row["n_reference"] == b["size"].sum()
        spread = [
            f"{s.min()}" if s.min() == s.max() else f"{s.min()}-{s.max()}" for s in (a["size"], b["size"])
        ]
        assert row["seeds_per_base"] == "/".join(spread)
        if table is planned:
            p[c["name"]] = res.pvalue
            level = alpha
            sd = d.std(ddof=1)
            assert row["power_observed"] == pytest.approx(_paired_power(0.05, sd, BASES, level), abs=0.01)
            assert row["power_planned"] == pytest.approx(_paired_power(0.05, 0.03, BASES, level), abs=0.01)
    assert planned.loc["calib_vs_tis", "seeds_per_base"] == "1-2/2"  # the failed run is not imputed
    order = sorted(p, key=p.get)
    running = 0.0
    for rank, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[name]))
        _close(planned.loc[name, "p_adjusted"], running, f"{name} p_adjusted")
    md = paths.table("planned", "md").read_text()
    assert "paired t" in md and "SD of the per-base difference" in md and "3 bases × 2/2 seeds" in md


def test_the_arms_are_intervals_over_base_means(tier):
    _, paths = tier
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    ends = ends.assign(arm=ends["arm"].fillna("").str.split(";")).explode("arm")
    arms = pd.read_csv(paths.table("arms", "csv")).set_index("arm")
    for arm in STUDY["arms"]:
        means = _base_means(ends, arm)["mean"].to_numpy()
        lo, hi = stats.t.interval(0.95, len(means) - 1, loc=means.mean(), scale=stats.sem(means))
        _close(
            arms.loc[arm, ["endpoint", "low", "high", "sd"]], [means.mean(), lo, hi, means.std(ddof=1)], arm
        )
        assert arms.loc[arm, "bases"] == BASES
    assert arms.loc["calib", "n"] == len(SEEDS) - 1 and arms.loc["calib", "runs"] == len(SEEDS)


def test_the_seed_unit_tables_say_their_seeds_are_nested_in_bases(tier):
    """The comparison and mechanism tables of a base-unit tier keep seed-unit intervals (descriptive), and
    their notes say so; the planned table's tests are the paired ones."""
    from fp8rl.report.paired import NESTED_SEEDS_NOTE

    _, paths = tier
    for name in ("comparison", "mechanism"):
        assert NESTED_SEEDS_NOTE in paths.table(name, "md").read_text(), name
    assert NESTED_SEEDS_NOTE not in paths.table("planned", "md").read_text()


def test_the_reward_gap_is_paired_within_base_at_every_step(tier):
    """`study_gap.reward_gaps`: per step, each base's seed mean of the arm minus the control's, then a
    t-interval over bases, recomputed here from the rewards the runs logged (the failed run left out);
    over the endpoint's window its mean is the contrast the table tests."""
    from fp8rl.report.load import load_tier
    from fp8rl.report.study_gap import reward_gaps

    cfg, paths = tier
    gaps = reward_gaps(load_tier(cfg, paths.runs_dir), cfg).set_index(["arm", "step"])
    assert sorted(set(gaps.index.get_level_values("arm"))) == sorted(a for a in STUDY["arms"] if a != "bf16")
    used = [s for s in cfg.runs() if s.run_id != FAILED]

    def base_mean(cell: str, base: int, step: int) -> float:
        return float(
            np.mean(
                [_reward(s, step) for s in used if s.run_id.startswith(f"{cell}/") and s.seed % BASES == base]
            )
        )

    for arm, cell in STUDY["arms"].items():
        if arm == "bf16":
            continue
        for step in (1, 7, STEPS):
            d = [base_mean(cell, b, step) - base_mean(STUDY["arms"]["bf16"], b, step) for b in range(BASES)]
            ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
            _close(
                gaps.loc[(arm, step), ["gap", "low", "high"]], [np.mean(d), ci.low, ci.high], f"{arm} {step}"
            )
            assert gaps.loc[(arm, step), "units"] == BASES
    window = gaps.loc["fp8"]
    window = window[window.index > STUDY["endpoint"]["from_frac"] * STEPS]
    explo = pd.read_csv(paths.table("exploratory", "csv")).set_index("contrast")
    _close(window["gap"].mean(), explo.loc["fp8_vs_bf16", "difference"], "the window's mean gap")
    assert paths.plot("study_reward_gap", "png").stat().st_size > 1000


def test_a_run_unit_study_keeps_its_columns():
    """Studies written before `unit` keep their dumps and tables: no `unit` key, no base columns."""
    from fp8rl.config import StudyConfig
    from fp8rl.report.planned import CONTRAST_COLUMNS, contrast_columns

    run = StudyConfig.model_validate({k: v for k, v in STUDY.items() if k != "unit"})
    assert "unit" not in run.model_dump() and run.test == "welch_t"
    assert contrast_columns(run) == CONTRAST_COLUMNS
    base = StudyConfig.model_validate(STUDY)
    assert base.test == "paired_t" and "bases" in contrast_columns(base)


def test_the_study_findings_quote_reads_the_paired_tables(tier):
    """The README/docs block of a base-unit study without a dose axis (the clipping tier's
    `clipping-findings`): every figure is the one its table holds, and its test is named as run."""
    from fp8rl.quotes.studies import study_findings
    from fp8rl.report.formats import interval, num

    cfg, paths = tier
    text = study_findings(paths.root.parent, cfg.tier)
    lines = text.splitlines()
    control = pd.read_csv(paths.table("control", "csv")).iloc[0]
    assert lines[0].endswith(f"{interval(control['rise'], control['low'], control['high'], 3)} over 3 units "
                             f"(base): **{control['verdict']}**.")  # fmt: skip
    planned = pd.read_csv(paths.table("planned", "csv"))
    for r in planned.to_dict("records"):
        want = (
            f"- {r['contrast']} (final-window reward, paired t over bases, Holm): {r['arm']} − {r['reference']} "
            f"= {interval(r['difference'], r['low'], r['high'], 3)}, p (adjusted) = {num(r['p_adjusted'], 3)}"
        )
        assert any(line.startswith(want) for line in lines), want
    (explo,) = [line for line in lines if line.startswith("- Exploratory")]
    assert "fp8 − bf16" in explo and "paired t p" in explo
    ends = pd.read_csv(paths.table("endpoints", "csv"))
    surv = pd.read_csv(paths.table("study_survival", "csv"))
    top = surv.loc[surv["peak_rel_entropy_max"].idxmax()]
    (entropy,) = [line for line in lines if line.startswith("- Entropy")]
    # the post-baseline peak: endpoints.csv's per run, the survival table's per arm, the same numbers
    assert f"the highest run {num(top['peak_rel_entropy_max'])} ({top['arm']})." in entropy
    for r in surv.to_dict("records"):
        assert f"{r['arm']} {num(r['peak_rel_entropy_median'])}" in entropy
    assert lines[-1] == f"- Divergences: none in {int(surv['trained'].sum())} runs that trained."
    assert int(surv["trained"].sum()) == len(ends) - 1  # the failed run did not train


def test_the_summary_ranks_the_arms_and_shows_the_study_figures(tier):
    """SUMMARY.md's arms section: the leaderboard ranks arms.csv's estimates highest first with their
    intervals and bases, and embeds the endpoint and survival figures the report drew; without the
    endpoint figure beside the tables (a publication made before it existed) the page has no section."""
    import shutil

    from fp8rl.report.summary_page import summary_page

    cfg, paths = tier
    page = paths.summary.read_text()
    assert paths.plot("study_endpoint", "png").stat().st_size > 1000
    assert "![study_endpoint](plots/study_endpoint.png)" in page
    assert "![study_survival](plots/study_survival.png)" in page
    arms = pd.read_csv(paths.table("arms", "csv"))
    section = page.split("## The arms", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "`" in line]
    listed = [r[1].strip("`") for r in rows]
    assert listed == list(arms.sort_values("endpoint", ascending=False, kind="stable")["arm"])
    assert [r[0].strip("| ") for r in rows] == [str(i) for i in range(1, len(arms) + 1)]
    top = arms.loc[arms["endpoint"].idxmax()]
    assert rows[0][2] == f"{top['endpoint']:.3f} [{top['low']:.3f}, {top['high']:.3f}]".replace("-", "−")
    assert all(r[3] == str(BASES) for r in rows)

    bare = paths.root.parent / "without_figure"
    shutil.copytree(paths.tables_dir, bare / "tables")
    manifest = json.loads(paths.manifest.read_text())
    without = summary_page(cfg, bare / "tables", manifest["control"]["comparison_void"], manifest["numerics"])
    head, tail = page.split("## The arms", 1)
    assert without == head + "## What it does not show" + tail.split("## What it does not show", 1)[1]


def test_the_leaderboard_shares_ranks_between_equal_estimates_and_puts_unscored_arms_last():
    from fp8rl.report.study_endpoint import leaderboard

    arms = pd.DataFrame({
        "arm": ["bf16", "a", "b", "none"], "runs": [4, 4, 4, 4], "n": [4, 4, 4, 0], "bases": [4, 4, 4, 0],
        "diverged": [0, 2, 0, 4], "endpoint": [0.5, 0.25, 0.5, float("nan")],
        "low": [0.4, 0.1, 0.3, float("nan")], "high": [0.6, 0.4, 0.7, float("nan")],
    })  # fmt: skip
    survival = pd.DataFrame({"arm": ["a", "none"], "median_div_step": [120.0, 40.0]})
    lines = leaderboard(arms, survival).splitlines()[2:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert [(c[0], c[1]) for c in cells] == [("1", "`bf16`"), ("1", "`b`"), ("3", "`a`"), ("–", "`none`")]
    assert (
        cells[2][5] == "2 of 4 (median step 120)"
        and cells[3][2] == "n/a"
        and cells[3][5] == "4 of 4 (median step 40)"
    )


def test_a_run_unit_leaderboard_counts_runs_only():
    from fp8rl.report.study_endpoint import leaderboard

    arms = pd.DataFrame({"arm": ["bf16", "a"], "runs": [3, 3], "n": [3, 2], "diverged": [0, 1],
                         "endpoint": [0.4, 0.45], "low": [0.3, 0.2], "high": [0.5, 0.7]})  # fmt: skip
    head, _, *rows = leaderboard(arms).splitlines()
    assert head == "| rank | arm | endpoint [95 % CI] | runs with an endpoint | diverged |"
    assert rows[0] == "| 1 | `a` | 0.450 [0.200, 0.700] | 2 of 3 | 1 of 3 |"
