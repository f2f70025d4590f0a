"""Loading run directories: statuses, the tidy frame, malformed lines skipped and counted."""

from __future__ import annotations

import re

import pytest
from report_fixtures import DIVERGED, FAILED, MALFORMED, MALFORMED_LINE, MISSING, NO_KL, STEPS, write_tier

from fp8rl.io import atomic_write_json
from fp8rl.report.load import ID_COLUMNS, load_tier, read_metrics


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    cfg = write_tier(tmp_path_factory.mktemp("tier"))
    return cfg, load_tier(cfg)


def test_every_matrix_cell_is_a_row_with_its_status(tier):
    cfg, rs = tier
    assert list(rs.runs["run_id"]) == [s.run_id for s in cfg.runs()]
    status = dict(zip(rs.runs["run_id"], rs.runs["status"], strict=True))
    assert status[DIVERGED] == "diverged"
    assert status[FAILED] == "failed"
    assert status[MISSING] == "missing"
    assert rs.runs.set_index("run_id").loc[MISSING, "reason"] == "no run directory"
    assert sum(s == "ok" for s in status.values()) == len(status) - 3


def test_values_frame_is_tidy_and_keeps_failed_and_diverged_runs(tier):
    _, rs = tier
    v = rs.values
    assert {*ID_COLUMNS, "status", "source", "step", "metric", "value"} <= set(v.columns)
    train = rs.metric("train")
    # one row per (run, step, metric): no duplicates
    assert not train.duplicated(["run_id", "step", "metric"]).any()
    assert train[train["run_id"] == FAILED]["step"].max() == 3
    diverged = train[(train["run_id"] == DIVERGED) & (train["metric"] == "entropy")]
    assert diverged["value"].isna().sum() == 1  # the NaN it logged is kept as NaN
    evals = rs.metric("lm_eval")
    assert set(evals["metric"]) == {"arith_gen/exact_match", "arith_mc/exact_match"}
    assert set(rs.metric("agent")["metric"]) == {"tool_call/accuracy"}
    assert evals["stderr"].eq(0.03).all()
    assert rs.metric("agent")["stderr"].isna().all()


def test_absent_metric_stays_absent_not_zero(tier):
    _, rs = tier
    kl = rs.metric("train", "mismatch/kl_k3")
    assert NO_KL not in set(kl["run_id"])
    assert set(rs.metric("train", "phantom/low_neg")["variant"]) == {"fp8", "fp8_tis", "fp8_calib"}  # no bf16
    assert set(rs.metric("train", "calib/ref_tokens")["variant"]) == {"fp8_calib"}


def test_malformed_line_is_skipped_counted_and_named(tier):
    _, rs = tier
    runs = rs.runs.set_index("run_id")
    assert runs.loc[MALFORMED, "malformed_lines"] == 1
    assert runs["malformed_lines"].sum() == 1
    steps = rs.metric("train", "reward/mean").query("run_id == @MALFORMED")["step"]
    assert sorted(steps) == [s for s in range(1, STEPS + 1) if s != MALFORMED_LINE]
    [problem] = rs.problems
    assert f"{MALFORMED}/metrics.jsonl:{MALFORMED_LINE}: malformed JSON" in problem


def test_read_metrics_skips_each_kind_of_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "entropy": 1.0}\n'
        "[1, 2]\n"
        '{"entropy": 1.0}\n'
        '{"step": 4, "entropy": "high"}\n'
        '{"step": true, "entropy": 1.0}\n'
        "\n"
        '{"step": 7, "entropy": Infinity, "reward/mean": null}\n'
        '{"step": 8, "entropy": 1.\n'
    )
    rows, problems = read_metrics(path)
    assert [r["step"] for r in rows] == [1, 7]
    assert rows[1] == {"step": 7, "entropy": float("inf")}  # null = absent
    assert [p.split(": ")[0] for p in problems] == [f"{path}:{n}" for n in (2, 3, 4, 5, 8)]
    assert "non-numeric value for 'entropy'" in problems[2]


def test_unreadable_summary_or_unknown_status_is_missing_with_reason(tmp_path):
    cfg = write_tier(tmp_path)
    runs_dir = tmp_path / "results" / "smoke" / "runs"
    a, b = cfg.runs()[0].run_id, cfg.runs()[1].run_id
    (runs_dir / a / "summary.json").write_text('{"status": "ok"')
    atomic_write_json(runs_dir / b / "summary.json", {"status": "finished"})
    rs = load_tier(cfg)
    runs = rs.runs.set_index("run_id")
    assert runs.loc[a, "status"] == "missing" and "summary.json" in runs.loc[a, "reason"]
    assert runs.loc[b, "status"] == "missing" and "'finished'" in runs.loc[b, "reason"]
    assert any(f"{a}/summary.json: unreadable JSON" in p for p in rs.problems)


def test_ratio_histograms_of_fp8_runs_are_loaded(tier):
    cfg, rs = tier
    have_dirs = {s.run_id for s in cfg.runs() if s.spec.fp8 and s.run_id not in (FAILED, MISSING)}
    assert set(rs.ratio_hists) == have_dirs
    hist = rs.ratio_hists[next(iter(have_dirs))]
    assert hist["tokens"] == 128 and sum(hist["counts"]["fp8/all"]) == 128


def test_malformed_ratio_histogram_is_a_named_problem(tmp_path):
    cfg = write_tier(tmp_path)
    run = next(s for s in cfg.runs() if s.spec.fp8 and s.run_id not in (FAILED, MISSING, DIVERGED))
    path = tmp_path / "results" / "smoke" / "runs" / run.run_id / "ratio_hist.json"
    path.write_text("{not json")
    rs = load_tier(cfg)
    assert run.run_id not in rs.ratio_hists
    assert any("ratio_hist.json" in p for p in rs.problems)


def test_recorded_deviations_are_listed_by_the_report(tmp_path):
    """A backend's deviations (summary.json `deviations`, as verl runs write them, built by the verl
    adapter's own `deviations`) reach the report page with the runs that have them; a tier without any
    has no such section."""
    import json

    from fp8rl.adapters.verl_overrides import deviations
    from fp8rl.report.build import build_report
    from fp8rl.report.pipeline import deviations_table

    cfg = write_tier(tmp_path)
    runs_dir = tmp_path / "results" / "smoke" / "runs"
    fp8_runs = [s for s in cfg.runs() if s.spec.fp8 and (runs_dir / s.run_id / "summary.json").is_file()]
    for spec in fp8_runs:
        path = runs_dir / spec.run_id / "summary.json"
        summary = json.loads(path.read_text())
        atomic_write_json(path, summary | {"backend": "verl", "deviations": deviations(cfg, spec)})
    rollout = deviations(cfg, fp8_runs[0])[0]
    assert "blockwise" in rollout
    table = deviations_table(load_tier(cfg)).set_index("deviation")
    assert table.loc[rollout, "runs"] == len(fp8_runs)
    assert set(table.loc[rollout, "variants"].split(", ")) == {s.variant for s in fp8_runs}
    build_report(cfg)
    page = (tmp_path / "results" / "smoke" / "report.html").read_text()
    assert "Deviations from the requested setup" in page and "128x128 blocks" in page

    clean = write_tier(tmp_path / "clean")
    assert deviations_table(load_tier(clean)).empty
    build_report(clean)
    clean_page = (tmp_path / "clean" / "results" / "smoke" / "report.html").read_text()
    assert "Deviations from the requested setup" not in clean_page


def test_a_nan_step_in_an_ok_run_is_a_named_problem(tmp_path):
    """The trainer ends a run that goes non-finite as diverged: an ok run's NaN step is damage, left out
    of the curves and means, and the report says so."""
    cfg = write_tier(tmp_path)
    ok = NO_KL
    path = next(p for p in tmp_path.rglob("metrics.jsonl") if ok in str(p))
    lines = path.read_text().splitlines()
    lines[2] = re.sub(r'"reward/mean": [^,}]+', '"reward/mean": NaN', lines[2])
    path.write_text("\n".join(lines) + "\n")
    rs = load_tier(cfg)
    assert rs.runs.set_index("run_id").loc[ok, "status"] == "ok"
    named = [p for p in rs.problems if ok in p and "step 3: reward/mean is nan" in p]
    assert len(named) == 1 and "says ok; left out of the curves and means" in named[0]
    assert not any(DIVERGED in p and "is nan" in p for p in rs.problems)  # a diverged run may log NaN


def test_the_eval_suites_a_run_must_have_are_the_registry_s(tmp_path, monkeypatch):
    """The report takes the eval suites from their registry (fp8rl.evaluate.suites), not from a list of
    its own: a suite registered here, `echo`, as its own module would register it, has its scores read
    as values of source `echo`, and a finished run without its result file is a named problem; a shipped
    suite the registry says the config does not turn on (here `agent`) is not asked for."""
    from dataclasses import replace

    from fp8rl import run_files
    from fp8rl.evaluate.suites import _registry

    monkeypatch.setattr(_registry, "EVAL_SUITES", (*_registry.EVAL_SUITES, "echo"))
    monkeypatch.setattr(_registry, "REGISTRY", dict(_registry.REGISTRY))
    monkeypatch.setitem(run_files.EVAL_FILES, "echo", "eval/echo.json")
    _registry.REGISTRY["agent"] = replace(_registry.REGISTRY["agent"], enabled=lambda cfg: False)
    lm_eval = _registry.REGISTRY["lm_eval"]
    _registry.register_suite(replace(lm_eval, name="echo", command="echo", enabled=lambda cfg: True))

    cfg = write_tier(tmp_path)
    runs_dir = tmp_path / "results" / "smoke" / "runs"
    scored = next(s.run_id for s in cfg.runs() if s.run_id not in (FAILED, MISSING, DIVERGED))
    result = {"task": "echo", "metric": "size", "value": 0.25, "n": 1}
    atomic_write_json(runs_dir / scored / "eval" / "echo.json", {"suite": "echo", "results": [result]})
    (runs_dir / scored / "eval" / "agent.json").unlink()
    rs = load_tier(cfg)

    echo = rs.metric("echo")
    assert list(zip(echo["run_id"], echo["metric"], echo["value"], strict=True)) == [
        (scored, "echo/size", 0.25)
    ]
    missing = sorted(p.split("/eval/")[0] for p in rs.problems if "/eval/echo.json: missing" in p)
    finished = rs.runs[rs.runs["status"].isin(["ok", "diverged"])]["run_id"]
    assert missing == sorted(str(runs_dir / r) for r in finished if r != scored)
    assert not any("agent.json" in p for p in rs.problems)
