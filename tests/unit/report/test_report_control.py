"""The control check (fp8rl.report.control): a synthetic tier whose bf16 reward rises, stays flat or falls
gets the verdict learned, flat or fell in tables/control.csv and report.json, and only a control that
did not learn voids the comparison (report.html's banner, the tables' notes); with several runs per
base the base is the unit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import report_fixtures
from scipy import stats

from fp8rl.report.build import build_report
from fp8rl.report.control import VOID, control_summary, control_table, verdict
from fp8rl.report.endpoints import windows
from fp8rl.report.paths import ReportPaths

REPO = Path(__file__).resolve().parents[3]

BASE_REWARD = report_fixtures.reward
# bf16's reward per step: seed s changes by slope × (1 + 0.1 s) per step (flat: seed 0 up, seed 1 down)
SLOPES = {"learned": lambda seed: 0.01 * (1 + 0.1 * seed), "fell": lambda seed: -0.01 * (1 + 0.1 * seed),
          "flat": lambda seed: 0.01 if seed == 0 else -0.01}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(SLOPES))
def tier(request, tmp_path_factory):
    """(expected verdict, config, report manifest) of the synthetic smoke tier with bf16's reward set."""
    slope = SLOPES[request.param]

    def reward(spec, step):
        if spec.variant != "bf16":
            return BASE_REWARD(spec, step)
        return 0.5 + slope(spec.seed) * step

    mp = pytest.MonkeyPatch()
    mp.setattr(report_fixtures, "reward", reward)
    try:
        cfg = report_fixtures.write_tier(tmp_path_factory.mktemp(request.param))
    finally:
        mp.undo()
    return request.param, cfg, build_report(cfg)


def test_the_verdict_follows_the_reward_and_its_interval(tier):
    want, cfg, manifest = tier
    paths = ReportPaths.for_config(cfg)
    control = pd.read_csv(paths.table("control", "csv"))
    assert list(control["algo"]) == ["grpo", "dapo"]
    assert (control["verdict"] == want).all(), control
    first, last = windows(report_fixtures.STEPS)
    rises = []
    for seed in (0, 1):  # the mean of steps 10-12 minus that of steps 1-2, per seed (= per base here)
        s = SLOPES[want](seed)
        rises.append(s * (np.mean(range(last, report_fixtures.STEPS + 1)) - np.mean(range(1, first + 1))))
    lo, hi = stats.t.interval(0.95, 1, loc=np.mean(rises), scale=stats.sem(rises))
    np.testing.assert_allclose(control.loc[0, ["rise", "low", "high"]].astype(float), [np.mean(rises), lo, hi],
                               rtol=1e-5, atol=1e-12)  # fmt: skip
    assert control.loc[0, "unit"] == "base" and control.loc[0, "n"] == 2  # sft.per_seed: a base per seed
    saved = json.loads(paths.manifest.read_text())["control"]
    assert saved == json.loads(json.dumps(manifest["control"]))
    assert [g["verdict"] for g in saved["groups"]] == [want, want]
    assert saved["learned"] is (want == "learned") and saved["comparison_void"] is (want != "learned")


def test_only_a_control_that_did_not_learn_voids_the_comparison(tier):
    want, cfg, _ = tier
    paths = ReportPaths.for_config(cfg)
    page = paths.html.read_text()
    void = want != "learned"
    assert ('class="banner"' in page) is void
    comparison = paths.table("comparison", "md").read_text()
    assert (VOID in comparison.lower()) is void
    control_md = paths.table("control", "md").read_text()
    assert (VOID in control_md.lower()) is void
    # the control section comes before every comparison in the page
    assert page.index("Did the bf16 control learn?") < page.index("<h2>Comparison</h2>")


def test_a_pipeline_check_leads_with_its_paired_excess_clipping_not_a_void_comparison(tier):
    """The synthetic tier has no study and no FP8 conditions (a pipeline check, as smoke): SUMMARY.md
    opens with what it shows, each FP8 variant's paired excess clipping as comparison.csv gives it, and
    where the control stayed flat says that its steps cannot show learning instead of 'void'."""
    from fp8rl.report.formats import pp

    want, cfg, _ = tier
    paths = ReportPaths.for_config(cfg)
    page = paths.summary.read_text()
    assert page.index("## What it shows: paired excess clipping") < page.index(
        "## Did the bf16 control learn?"
    )
    comparison = pd.read_csv(paths.table("comparison", "csv"))
    fp8 = comparison[(comparison["algo"] == "grpo") & (comparison["variant"] == "fp8")].iloc[0]
    cols = ("excess_clip", "excess_clip ci_low", "excess_clip ci_high")
    assert f"- grpo/fp8: {pp(*(fp8[c] for c in cols))} ({int(fp8['excess_clip n'])} seeds)" in page  # 3 seeds
    short = f"{cfg.schedule.steps} steps cannot show learning"
    assert (short in page) is (want != "learned")
    assert "The comparison is void" not in page


def _endpoints(rises: dict[tuple[str, int], float]) -> pd.DataFrame:
    rows = [
        {"algo": "grpo", "model": "m", "condition": None, "variant": "bf16", "base": base, "seed": seed,
         "status": "ok", "reward_first": 0.2, "reward_last": 0.2 + r, "reward_rise": r}
        for (base, seed), r in rises.items()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_with_several_runs_per_base_the_base_is_the_unit():
    rises = {
        ("b0", 0): 0.10,
        ("b0", 1): 0.30,
        ("b1", 2): 0.10,
        ("b1", 3): 0.20,
        ("b2", 4): 0.30,
        ("b2", 5): 0.20,
    }
    table = control_table(_endpoints(rises))
    per_base = [0.20, 0.15, 0.25]  # a t-interval over 6 seeds would be narrower
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(per_base), scale=stats.sem(per_base))
    row = table.iloc[0]
    assert row["unit"] == "base" and row["n"] == 3 and row["used"] == 6
    np.testing.assert_allclose([row["rise"], row["low"], row["high"]], [np.mean(per_base), lo, hi])
    assert row["verdict"] == "learned"


def test_one_shared_base_makes_the_seed_the_unit_and_one_run_gives_no_interval():
    table = control_table(_endpoints({("b", 0): 0.1, ("b", 1): -0.1, ("b", 2): 0.05}))
    assert table.iloc[0]["unit"] == "seed (one base)" and table.iloc[0]["n"] == 3
    assert table.iloc[0]["verdict"] == "flat"
    one = control_table(_endpoints({("b", 0): 0.3}))
    assert one.iloc[0]["verdict"] == "no interval" and math.isnan(one.iloc[0]["low"])
    assert control_summary(one)["comparison_void"] is True
    none = control_table(_endpoints({("b", 0): math.nan}))  # e.g. every bf16 run failed or is missing
    assert none.iloc[0]["n"] == 0 and none.iloc[0]["used"] == 0
    assert "no run with a reward" in control_summary(none)["statement"]


def test_no_bf16_runs_means_no_control_and_no_void():
    table = control_table(_endpoints({("b", 0): 0.1}).assign(variant="fp8"))
    summary = control_summary(table)
    assert table.empty and summary["learned"] is None and summary["comparison_void"] is False


@pytest.mark.parametrize(("low", "high", "want"), [(0.01, 0.2, "learned"), (-0.1, 0.1, "flat"),
                                                   (-0.3, -0.02, "fell"), (math.nan, math.nan, "no interval"),
                                                   (0.1, 0.1, "no interval")])  # fmt: skip
def test_verdict_of_an_interval(low, high, want):
    assert verdict(low, high) == want


def test_an_all_failed_control_is_not_said_to_have_not_learned():
    """Every bf16 run failed: the control never ran, which the summary must not call a control that did
    not learn (it says so in the statement, the tables' notes and SUMMARY.md's control and caveats)."""
    from fp8rl.report.control import UNCHECKED, void_notes
    from fp8rl.report.findings import control_lines, planned_lines
    from fp8rl.report.summary_page import _caveats

    failed = _endpoints({("b", 0): math.nan, ("b", 1): math.nan}).assign(status="failed")
    table = control_table(failed)
    summary = control_summary(table)
    assert summary["comparison_void"] is True
    said = [summary["statement"], *void_notes(summary, ["n"]), *control_lines(table, True)]
    said += _caveats(_smoke_two_seeds(), table, True, None)
    said += planned_lines(pd.DataFrame([PLANNED_ROW]), True, True)
    assert not [s for s in said if "did not learn" in s], said
    assert UNCHECKED in summary["statement"].lower()
    assert any(
        "No conclusion about FP8 against bf16: no bf16 control run finished (of the" in s for s in said
    )
    assert not [s for s in said if "judged over 0" in s], said  # the never-run control has no units
    assert said[-1].endswith("(void: the control never ran).")
    # one group learned, another failed to run: still not a control that did not learn
    mixed = pd.concat(
        [_endpoints({("b", 0): 0.2, ("b", 1): 0.21, ("b", 2): 0.19}), failed.assign(algo="dapo")]
    )
    mixed_table = control_table(mixed)
    assert "did not learn" not in control_summary(mixed_table)["statement"]
    # ... and not one of which no run finished: the grpo control ran and learned
    from fp8rl.report.control import UNCHECKED_SOME

    said = [control_summary(mixed_table)["statement"], *control_lines(mixed_table, True)]
    said += _caveats(_smoke_two_seeds(), mixed_table, True, None)
    assert not [s for s in said if "no bf16 control run finished" in s], said
    assert UNCHECKED_SOME in control_summary(mixed_table)["statement"].lower()
    assert any("the bf16 control of some groups has no finished run" in s for s in said[2:]), said
    flat = control_table(_endpoints({("b", 0): 0.1, ("b", 1): -0.1}))
    assert VOID[1:] in control_summary(flat)["statement"]  # a control that ran and stayed flat


def _smoke_two_seeds():
    from fp8rl.config_loader import load_config

    return load_config(REPO / "config" / "smoke.yaml", ["matrix.seeds=[0, 1]"])


PLANNED_ROW = {"contrast": "c", "arm": "fp8", "reference": "bf16", "difference": 0.1, "low": 0.0,
               "high": 0.2, "p_adjusted": 0.5, "decision": "no difference"}  # fmt: skip


def test_the_planned_decisions_of_an_all_failed_control_say_it_never_ran(monkeypatch):
    """The planned table's decision suffix follows the control: a control whose runs all failed never
    ran, and a control that ran and stayed flat did not learn."""
    import fp8rl.report.planned as planned
    from fp8rl.report.pipeline import study_report_tables

    frame = pd.DataFrame([PLANNED_ROW])
    tables = {name: (frame, frame.copy(), ["n"]) for name in ("planned", "exploratory", "arms")}
    monkeypatch.setattr(planned, "study_tables", lambda endpoints, cfg: tables)
    failed = _endpoints({("b", 0): math.nan, ("b", 1): math.nan}).assign(status="failed")
    flat = _endpoints({("b", 0): 0.1, ("b", 1): -0.1})
    said = {}
    for name, ends in (("failed", failed), ("flat", flat)):
        control = control_summary(control_table(ends))
        (table,) = [t for t in study_report_tables(None, None, control) if t.name == "planned"]
        said[name] = table.view["decision"].tolist()
    assert said["failed"] == ["no difference (void: no bf16 control run finished)"]
    assert said["flat"] == ["no difference (void: the bf16 control did not learn)"]


def test_a_partly_finished_pretrained_tier_is_not_said_to_rest_on_one_base():
    """The paper tier's models are pretrained checkpoints, each its runs' one base: its caveats say so per
    model instead of "every run starts from one base model", and a control with no finished run is not
    "judged over 0 units" (issue 57's rehearsed report)."""
    from fp8rl.config_loader import load_config
    from fp8rl.report.summary_page import _caveats

    cfg = load_config(REPO / "config" / "paper.yaml")
    failed = _endpoints({("b", 0): math.nan}).assign(status="failed")
    said = _caveats(cfg, control_table(failed), True, None)
    planned = sum(r.variant == "bf16" for r in cfg.runs())
    assert any(f"no bf16 control run finished (of the {planned} the matrix plans)" in s for s in said), said
    assert any("Each model's runs start from its one pretrained checkpoint" in s for s in said), said
    assert not [s for s in said if "Every run starts from one base model" in s or "judged over" in s], said
