"""Damaged run files: each damaged run is named under data problems, kept out of the means, and the
report still completes (a run's numbers are never shown as a result when its files contradict each other)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import DIVERGED, FAILED, MALFORMED, MISSING, NO_KL, STEPS, reward, write_tier

from fp8rl.report.build import build_report
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.load import load_tier
from fp8rl.run_checks import history_problems


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _edit_json(path: Path, **changes) -> None:
    obj = json.loads(path.read_text())
    obj.update(changes)
    path.write_text(json.dumps(obj))


def _truncate(run: Path) -> None:  # a metrics file cut to 3 of its 12 steps
    (run / "metrics.jsonl").write_text("".join(_lines(run / "metrics.jsonl")[:3]))


def _duplicate_last_step(run: Path) -> None:  # the last step again, with another reward
    lines = _lines(run / "metrics.jsonl")
    again = json.loads(lines[-1]) | {"reward/mean": 0.9}
    (run / "metrics.jsonl").write_text("".join(lines) + json.dumps(again) + "\n")


def _swap_steps(run: Path) -> None:
    lines = _lines(run / "metrics.jsonl")
    lines[2], lines[3] = lines[3], lines[2]
    (run / "metrics.jsonl").write_text("".join(lines))


def _delete_metrics(run: Path) -> None:
    (run / "metrics.jsonl").unlink()


def _final_differs(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    _edit_json(run / "summary.json", final=summary["final"] | {"reward/mean": 0.99})


def _step_as_word(run: Path) -> None:
    _edit_json(run / "summary.json", step="eight")


def _summary_not_utf8(run: Path) -> None:
    (run / "summary.json").write_bytes(b'{"status": "ok", "reason": "\xff\xfe"}')


# kind of damage -> (what it does to a run directory, what the problem line then says)
DAMAGE = {
    "truncated": (_truncate, "says step 12 (ok) but the metrics ends at step 3"),
    "duplicated": (_duplicate_last_step, "step 12 written more than once"),
    "swapped": (_swap_steps, "steps out of order: 3 after 4"),
    "deleted": (_delete_metrics, "says step 12 (ok) but the metrics has no steps"),
    "final": (_final_differs, "final metrics differ from the last step (12): reward/mean 0.99"),
    "word": (_step_as_word, "step 'eight' is not a non-negative integer"),
    "summary_bytes": (_summary_not_utf8, "summary.json: unreadable JSON"),
}


def _normal_runs(cfg) -> list[str]:
    special = {DIVERGED, FAILED, MISSING, NO_KL, MALFORMED}
    return [s.run_id for s in cfg.runs() if s.run_id not in special]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """The synthetic tier with one ok run per kind of damage, plus wrong types in the other run files."""
    tmp = tmp_path_factory.mktemp("damaged")
    cfg = write_tier(tmp)
    runs_dir = tmp / "results" / cfg.tier / "runs"
    normal = _normal_runs(cfg)
    victims = dict(zip(DAMAGE, normal, strict=False))
    for kind, run_id in victims.items():
        DAMAGE[kind][0](runs_dir / run_id)
    spare = normal[len(DAMAGE) :]
    # wrong types and corrupt bytes in the files that are not the training history: named, ignored
    odd = runs_dir / spare[0]
    _edit_json(odd / "throughput.json", emulated="yes", phases=["rollout"])
    _edit_json(odd / "eval" / "lm_eval.json", results="arith_gen")
    lines = _lines(odd / "metrics.jsonl")  # one line of corrupt bytes in the middle: skipped, counted
    (odd / "metrics.jsonl").write_bytes(
        "".join(lines[:4]).encode() + b"\xff\xfe\n" + "".join(lines[5:]).encode()
    )
    (odd / "eval" / "agent.json").write_bytes(b"\x80\x81 not text")
    _edit_json(odd / "ratio_hist.json", counts={"fp8/all": "many"})
    return cfg, victims, odd.relative_to(runs_dir).as_posix()


def test_each_damaged_run_is_a_named_problem_and_not_a_result(damaged):
    cfg, victims, _ = damaged
    rs = load_tier(cfg)
    runs = rs.runs.set_index("run_id")
    for kind, run_id in victims.items():
        _, says = DAMAGE[kind]
        assert runs.loc[run_id, "status"] == "missing", kind
        assert any(run_id in p and says in p for p in rs.problems), (kind, says, rs.problems)
        assert runs.loc[run_id, "reason"], kind
    # their training numbers are out of every mean: the tidy frame marks them missing too
    train = rs.metric("train")
    assert set(train[train["run_id"].isin(victims.values())]["status"]) == {"missing"}
    ends = endpoints_table(rs, cfg).set_index("run_id")
    assert ends.loc[victims["truncated"], "status"] == "missing"


def test_wrong_types_and_corrupt_bytes_elsewhere_are_problems_not_crashes(damaged):
    cfg, _, odd = damaged
    rs = load_tier(cfg)
    runs = rs.runs.set_index("run_id")
    assert runs.loc[odd, "status"] == "ok"  # its history is intact: one skipped line is tolerated
    assert runs.loc[odd, "malformed_lines"] == 1
    mine = [p for p in rs.problems if odd in p]
    for says in (
        "metrics.jsonl:5: not UTF-8 text",
        "throughput.json: wrong type for 'emulated', 'phases'",
        "lm_eval.json: 'results' is not a list",
        "agent.json: unreadable JSON",
        "ratio_hist.json: not a ratio histogram",
    ):
        assert any(says in p for p in mine), (says, mine)
    assert odd not in rs.ratio_hists
    assert rs.metric("throughput").query("run_id == @odd").empty


def test_report_completes_and_lists_every_damaged_run(damaged):
    cfg, victims, _ = damaged
    manifest = build_report(cfg)
    assert manifest["status_counts"]["missing"] == 1 + len(victims)
    for run_id in victims.values():
        assert any(run_id in p for p in manifest["problems"])
    html = Path(cfg.results_dir, cfg.tier, "report.html").read_text()
    assert "step 12 written more than once" in html
    # the truncated run's step-3 reward is not in its variant's final_reward: only the other seed's is
    spec = next(s for s in cfg.runs() if s.run_id == victims["truncated"])
    comp = pd.read_csv(Path(cfg.results_dir, cfg.tier, "tables", "comparison.csv"))
    row = comp[(comp["algo"] == spec.algo) & (comp["variant"] == spec.variant)].iloc[0]
    other = next(s for s in cfg.runs() if s.variant == spec.variant and s.algo == spec.algo and s != spec)
    assert row["final_reward n"] == 1
    assert row["final_reward"] == pytest.approx(reward(other, STEPS))


@pytest.mark.parametrize(
    ("status", "step", "steps", "skipped", "ok"),
    [
        ("ok", 4, [1, 2, 3, 4], 0, True),
        ("ok", 4, [1, 2, 4], 1, True),  # step 3's line was skipped as malformed (counted there)
        ("ok", 4, [1, 2, 4], 0, False),
        ("diverged", 5, [1, 2, 3, 4], 0, True),  # the reference trainer never writes the step that blew up
        ("diverged", 3, [1, 2, 3, 4], 0, True),  # verl: detected on the imported log
        ("diverged", 6, [1, 2, 3, 4], 0, False),
        ("failed", 0, [], 0, True),
        ("failed", 2, [], 0, False),
    ],
)
def test_history_rules(status, step, steps, skipped, ok):
    rows = [{"step": s, "reward/mean": 0.1 * s} for s in steps]
    final = {"reward/mean": rows[-1]["reward/mean"]} if rows else {}
    summary = {"status": status, "step": step, "final": final}
    assert (history_problems(summary, rows, skipped) == []) is ok


def test_nan_in_the_last_row_matches_nothing_but_nan():
    rows = [{"step": 1, "entropy": math.nan}]
    assert history_problems({"status": "ok", "step": 1, "final": {"entropy": math.nan}}, rows) == []
    assert history_problems({"status": "ok", "step": 1, "final": {"entropy": 9.0}}, rows)
