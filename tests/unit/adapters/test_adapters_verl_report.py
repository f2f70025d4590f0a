"""The paper config's report on runs as the verl path leaves them (fp8rl.adapters.rehearse_report): verl's
own FileLogger writes each attempt's log, fp8rl's import writes the run files, the eval suites' writers
the result files, and `fp8rl report --config config/paper.yaml` must build every output of its report
flags, list the run that failed for good as `failed` and the one whose log holds a NaN (orjson's `null`)
as `diverged`, and write SUMMARY.md. Runs in the verl environment (test_adapters_verl_env.py)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.adapters import rehearse_report
from fp8rl.adapters.rehearse_report import CELLS, STATUS_OF, cell_spec, check_tables, rehearse
from fp8rl.config_loader import load_config
from fp8rl.report.paths import ReportPaths

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"


def _report_here(argv: list[str]) -> subprocess.CompletedProcess:
    """The fp8rl command line in this environment (the rehearsal job runs it in the cpu image's venv)."""
    return subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", *argv], capture_output=True, text=True, timeout=900, cwd=ROOT
    )


@pytest.fixture(scope="module")
def rehearsed(verl_site, tmp_path_factory):
    work = tmp_path_factory.mktemp("paper-report")
    result = rehearse(PAPER, [], work, _report_here)
    cfg = load_config(PAPER, [f"results_dir={work / 'results_paper'}"])
    return result, cfg, work


def test_the_paper_report_builds_on_runs_as_the_verl_path_leaves_them(rehearsed):
    result, cfg, _ = rehearsed
    assert result.ok and not result.skipped, result.detail
    paths = ReportPaths.for_config(cfg)
    assert all(p.is_file() for p in paths.outputs())
    with open(paths.table("runs", "csv"), newline="") as fh:
        status = {r["run_id"]: r["status"] for r in csv.DictReader(fh)}
    want = {cell_spec(cfg, c).run_id: STATUS_OF[c.ends] for c in CELLS}
    assert {k: status[k] for k in want} == want
    assert sorted(want.values()) == ["diverged", "failed", "ok", "ok"]
    runs_md = paths.table("runs", "md").read_text()
    failed = next(k for k, v in want.items() if v == "failed")
    assert any(failed in line and "| failed" in line for line in runs_md.splitlines())
    summary = paths.summary.read_text()
    assert "1 failed" in summary and "1 diverged" in summary
    assert "FP8 is emulated on CPU" not in summary  # verl's runs record hardware execution


def test_the_runs_are_written_by_verls_file_logger_and_the_import(rehearsed):
    _, cfg, work = rehearsed
    runs = work / "results_paper" / cfg.tier / "runs"
    nan = next(c for c in CELLS if c.ends == "nan")
    run = runs / cell_spec(cfg, nan).run_id
    log = (run / "verl_logs" / "attempt-001.jsonl").read_text()
    assert '"actor/entropy":null' in log  # orjson's NaN
    assert (
        "null" not in (run / "metrics.jsonl").read_text() and "NaN" not in (run / "metrics.jsonl").read_text()
    )
    failed = next(c for c in CELLS if c.ends == "failed")
    run = runs / cell_spec(cfg, failed).run_id
    assert len(list((run / "verl_logs").glob("attempt-*.jsonl"))) == 2
    assert not (run / "eval").exists()
    ok = runs / cell_spec(cfg, CELLS[0]).run_id
    assert {p.name for p in (ok / "eval").glob("*.json")} == {"lm_eval.json", "agent.json"}


def test_a_report_that_loses_a_run_or_an_output_is_caught(rehearsed, tmp_path):
    _, cfg, work = rehearsed
    want = {cell_spec(cfg, c).run_id: STATUS_OF[c.ends] for c in CELLS}
    published = work / "published"
    assert check_tables(published, want) == []
    failed = next(k for k, v in want.items() if v == "failed")
    assert any(
        failed in p and "'failed', not 'ok'" in p for p in check_tables(published, want | {failed: "ok"})
    )
    assert any("SUMMARY.md: not written" in p for p in check_tables(tmp_path, want))
    # fp8rl publish refuses a report that lacks an output of the config's report flags
    plot = next((work / "results_paper" / cfg.tier / "plots").glob("*.svg"))
    plot.rename(tmp_path / plot.name)
    try:
        res = _report_here(["publish", "--config", str(PAPER), "--set", f"results_dir={work / 'results_paper'}",
                            "--out", str(tmp_path / "published")])  # fmt: skip
        assert res.returncode == 2 and plot.name in res.stderr, res.stderr
    finally:
        (tmp_path / plot.name).rename(plot)


@pytest.mark.parametrize("command", ["report", "publish"])
def test_a_failing_report_or_publish_fails_the_rehearsal(verl_site, tmp_path, command):
    def fp8rl(argv):
        if argv[0] == command:
            return subprocess.CompletedProcess(argv, 1, "", "Traceback ...\nKeyError: 'status'")
        return subprocess.CompletedProcess(argv, 0, "", "")

    result = rehearse(PAPER, [], tmp_path, fp8rl)
    assert not result.ok and f"fp8rl {command} --config paper.yaml exited 1" in result.detail
    assert "KeyError" in result.detail


def test_a_matrix_without_an_fp8_variant_is_refused_by_name(verl_site, tmp_path):
    result = rehearse(PAPER, ["matrix.variants=[bf16]"], tmp_path, _report_here)
    assert not result.ok and "no FP8 run of grpo/qwen3-8b" in result.detail
    assert rehearse_report.JOB in result.line()
