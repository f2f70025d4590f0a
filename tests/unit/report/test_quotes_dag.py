"""The tiers' run times docs/performance.md quotes come from the records `benchmarks/dag_time.py --json`
writes: built here by the benchmark itself from benchmark files laid out as Snakemake writes them."""

from __future__ import annotations

import json

import pytest

from fp8rl.quotes.benchmarks import performance_dag
from fp8rl.quotes.registry import QuoteError
from tests.unit.test_dag_time import _job, _load


@pytest.fixture
def published(tmp_path):
    dt, t0 = _load(), 1_000_000.0
    smoke = tmp_path / "results" / "smoke"
    _job(smoke, "sft/tiny.tsv", 40, 38, t0 + 40)
    _job(smoke, "train/grpo/tiny/bf16/none/seed0.tsv", 15, 14, t0 + 55)
    _job(smoke, "train/grpo/tiny/fp8/tensorwise/seed0.tsv", 16, 15, t0 + 57)
    _job(smoke, "eval_lm/grpo/tiny/bf16/none/seed0.tsv", 8, 6, t0 + 70)
    _job(smoke, "report/report.tsv", 20, 18, t0 + 330)  # the DAG: 0 -> 330 s, over 5 min
    stress = tmp_path / "results" / "stress"
    _job(stress, "sft/chain.tsv", 600, 590, t0 + 600)
    _job(stress, "train/grpo/chain/bf16/none/seed0.tsv", 500, 480, t0 + 1100)  # starts at 600
    _job(stress, "train/grpo/chain/fp8/tensorwise/seed0.tsv", 700, 650, t0 + 1780)  # ends at 1780
    out = tmp_path / "published" / "benchmarks"
    assert dt.main([str(smoke), "--json", str(out / "smoke_dag.json")]) == 0
    assert dt.main([str(stress), "--json", str(out / "stress_dag.json")]) == 0
    return tmp_path / "published"


def test_each_span_is_set_against_its_target_with_the_per_rule_split(published):
    text = performance_dag(published)
    smoke, stress = text.split("\n\n")
    assert smoke.startswith("The smoke DAG ran in 5 min 30 s") and "target ≤ 5 min: not met" in smoke
    # largest summed wall time first
    assert "sft 40 s (1 job), train 31 s (2 jobs), report 20 s (1 job), eval_lm 8 s (1 job)" in smoke
    # the training span: first train start (600) to last train end (1780) = 19 min 40 s
    assert "The stress tier's 2 training runs ran in 19 min 40 s" in stress
    assert "target ≤ 20 min: met" in stress and "600 s of wall time per run on average" in stress
    assert "0.94 CPU seconds per wall second" in stress  # (480 + 650) / (500 + 700)
    assert "Measured at commit" in smoke and "cores" in stress


def test_a_missing_or_foreign_record_is_named(published):
    (published / "benchmarks" / "stress_dag.json").unlink()
    with pytest.raises(QuoteError, match="stress_dag.json: not published"):
        performance_dag(published)
    (published / "benchmarks" / "stress_dag.json").write_text(json.dumps({"wall_seconds": 445.4}))
    with pytest.raises(QuoteError, match="not a benchmarks/dag_time.py record"):
        performance_dag(published)


def test_the_startup_table_sets_each_job_kind_s_imports_against_its_job_time(published):
    """process_startup.json as benchmarks/process_startup.py writes it (its own main, with the process
    timing replaced), against the smoke DAG record built above."""
    import importlib.util
    import sys
    from pathlib import Path

    from fp8rl.quotes.benchmarks import performance_startup

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "process_startup.py"
    spec = importlib.util.spec_from_file_location("process_startup", path)
    ps = importlib.util.module_from_spec(spec)
    sys.modules["process_startup"] = ps
    spec.loader.exec_module(ps)
    seconds = {"train": 4.0, "eval_lm": 6.0, "sft": 2.0}
    ps.time_imports = lambda modules, threads: next(
        (v for k, v in seconds.items() if ps.KINDS[k] == modules), 0.1
    )
    out = published / "benchmarks" / "process_startup.json"
    assert ps.main(["--repeats", "3", "--json", str(out)]) == 0
    text = performance_startup(published)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| job")]
    # jobs and mean job seconds from the smoke record: train 2 jobs of 15 and 16 s, eval_lm 1 of 8 s
    assert "| train | 2 | 4.00 | 15.5 | 26 % |" in rows and "| eval_lm | 1 | 6.00 | 8.0 | 75 % |" in rows
    assert "| sft | 1 | 2.00 | 40.0 | 5 % |" in rows and not any("eval_agent" in r for r in rows)
    # summed: 2 x 4 + 6 + 2 = 16 s of the record's 40 + 31 + 8 + 20 = 99 job seconds
    assert "16 s of its 99 job seconds (16 %)" in text and "median of 3 fresh processes" in text
    out.unlink()
    with pytest.raises(QuoteError, match="process_startup.json: not published"):
        performance_startup(published)


def test_the_one_eval_process_per_run_is_set_against_one_per_suite(tmp_path):
    """Two dag_time.py records of the smoke DAG, one with eval_lm and eval_agent jobs, one with `eval`."""
    from fp8rl.quotes.benchmarks import performance_dag_eval

    dt, t0 = _load(), 1_000_000.0
    before, after = tmp_path / "before" / "smoke", tmp_path / "after" / "smoke"
    _job(before, "train/grpo/tiny/bf16/none/seed0.tsv", 100, 90, t0 + 100)
    _job(before, "eval_lm/grpo/tiny/bf16/none/seed0.tsv", 8, 6, t0 + 300)
    _job(before, "eval_agent/grpo/tiny/bf16/none/seed0.tsv", 7, 5, t0 + 400)  # 0 -> 400 s
    _job(after, "train/grpo/tiny/bf16/none/seed0.tsv", 100, 90, t0 + 100)
    _job(after, "eval/grpo/tiny/bf16/none/seed0.tsv", 10, 8, t0 + 300)  # 0 -> 300 s
    out = tmp_path / "published" / "benchmarks"
    assert dt.main([str(before), "--json", str(out / "smoke_dag_eval_per_suite.json")]) == 0
    assert dt.main([str(after), "--json", str(out / "smoke_dag_eval_per_run.json")]) == 0
    text = performance_dag_eval(tmp_path / "published")
    assert text.startswith("The smoke DAG from scratch ran in 6 min 40 s with one evaluation process per run")
    assert "(2 evaluation jobs, 15 s of wall time and 11 CPU seconds summed)" in text
    assert "in 5 min 00 s with one per run (1 jobs, 10 s and 8 CPU seconds)" in text
    assert "after / before 0.75 for the whole DAG, 0.67 for the evaluations' wall time and 0.73" in text
    assert "Before: measured at commit" in text and "; after: at commit" in text
    record = json.loads((out / "smoke_dag_eval_per_run.json").read_text())
    record["checkout"] = "ed75c8c with c3eca5c applied"
    (out / "smoke_dag_eval_per_run.json").write_text(json.dumps(record))
    assert "; after: at ed75c8c with c3eca5c applied on " in performance_dag_eval(tmp_path / "published")
    (out / "smoke_dag_eval_per_run.json").write_text((out / "smoke_dag_eval_per_suite.json").read_text())
    with pytest.raises(QuoteError, match="smoke_dag_eval_per_run.json: no `eval` jobs recorded"):
        performance_dag_eval(tmp_path / "published")
