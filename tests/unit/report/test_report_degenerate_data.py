"""Degenerate eval data is a named data problem, never a silent drop, a mis-averaged seed or a crash: a
NaN score, a proportion outside [0, 1], a score over `n: 0` examples, a task given twice in one file and
a directory where an eval file belongs; and a zero-width interval (seeds that all gave one value) is
never counted as excluding 0, and is a benign data note, listed apart from the data problems."""

from __future__ import annotations

import json
import math

import pytest
from report_fixtures import write_tier

from fp8rl.report.build import build_report
from fp8rl.report.comparison import comparison_table
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.formats import excludes_zero, pp
from fp8rl.report.load import load_tier

RUN = "grpo/tiny/fp8/tensorwise/seed1"
KEY = ("grpo", "fp8")


def _edit(path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc["results"])
    path.write_text(json.dumps(doc))


def _nan(results):  # json.dumps writes NaN
    results[0]["value"] = math.nan


def _above_one(results):
    results[0]["value"] = 1.7


def _no_examples(results):
    results[0]["n"] = 0


def _twice(results):
    results.append(dict(results[0]))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_nan, "value nan is not finite"),
        (_above_one, "value 1.7 of a proportion is outside [0, 1]"),
        (_no_examples, "n = 0: a score over no example"),
        (_twice, "given 2 times in the file"),
    ],
)
def test_a_degenerate_eval_score_is_a_data_problem_and_the_report_builds(tmp_path, change, named):
    cfg = write_tier(tmp_path)
    path = tmp_path / "results" / cfg.tier / "runs" / RUN / "eval" / "lm_eval.json"
    _edit(path, change)
    rs = load_tier(cfg)
    problems = [p for p in rs.problems if str(path) in p]
    assert problems and all(f"(arith_gen/exact_match): {named}; entry ignored" in p for p in problems)
    table = comparison_table(rs, endpoints_table(rs, cfg)).set_index(["algo", "variant"])
    assert int(table.loc[KEY, "arith_gen/exact_match n"]) == 1  # the other seed only, never two for one
    if change is _above_one:  # the plot of that cell crashed the whole report (a negative error bar)
        manifest = build_report(cfg)
        assert any(named in p for p in manifest["problems"])


def test_a_directory_where_an_eval_file_belongs_is_named(tmp_path):
    cfg = write_tier(tmp_path)
    path = tmp_path / "results" / cfg.tier / "runs" / RUN / "eval" / "agent.json"
    path.unlink()
    path.mkdir()
    rs = load_tier(cfg)
    assert any(f"{path}: not a file" in p for p in rs.problems)


def test_a_zero_width_interval_does_not_exclude_zero():
    assert not excludes_zero(0.19, 0.19) and not excludes_zero(-0.02, -0.02)
    assert excludes_zero(0.01, 0.02) and not excludes_zero(-0.01, 0.02)
    assert not pp(0.01, 0.01, 0.01).startswith("**") and pp(0.01, 0.005, 0.02).startswith("**")


def test_seeds_that_all_gave_one_value_are_a_named_data_note(tmp_path):
    """Two seeds with the same score give [x, x]: listed under data notes (not problems: the data is
    sound), never 'significant'; report.json and report.html keep the two lists apart."""
    from fp8rl.report.comparison import zero_width_notes

    cfg = write_tier(tmp_path)
    runs = tmp_path / "results" / cfg.tier / "runs"
    seed0 = json.loads((runs / RUN.replace("seed1", "seed0") / "eval" / "lm_eval.json").read_text())
    _edit(runs / RUN / "eval" / "lm_eval.json", lambda results: results.__setitem__(0, seed0["results"][0]))
    rs = load_tier(cfg)
    table = comparison_table(rs, endpoints_table(rs, cfg))
    notes = zero_width_notes(table)
    named = [p for p in notes if p.startswith("grpo/tiny/tensorwise/fp8 arith_gen/exact_match: a zero-width")]
    assert len(named) == 1 and "not a significant result" in named[0]
    row = table.set_index(["algo", "variant"]).loc[KEY]
    assert row["arith_gen/exact_match ci_low"] == row["arith_gen/exact_match ci_high"]
    assert not excludes_zero(row["arith_gen/exact_match ci_low"], row["arith_gen/exact_match ci_high"])
    manifest = build_report(cfg)
    assert named[0] in manifest["notes"] and not any("zero-width" in p for p in manifest["problems"])
    page = (tmp_path / "results" / cfg.tier / "report.html").read_text()
    assert f"<h2>Data notes ({len(manifest['notes'])})</h2>" in page
    assert ("<h2>Data problems (" in page) == bool(manifest["problems"])
