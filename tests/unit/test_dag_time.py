"""benchmarks/dag_time.py: a rule's span and sums from Snakemake benchmark files as Snakemake writes them."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "dag_time.py"
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _load():
    spec = importlib.util.spec_from_file_location("dag_time", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(tier: Path, rel: str, seconds: float, cpu: float, end: float) -> None:
    path = tier / "benchmarks" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        HEADER + f"{seconds:.2f}\t0:00:00\t500.0\t1200.0\t390.0\t440.0\t2.2\t12.4\t63.7\t{cpu:.2f}\n"
    )
    os.utime(path, (end, end))


def test_spans_run_from_the_first_start_to_the_last_end_per_rule(tmp_path, capsys):
    tier, t0 = tmp_path / "stress", 1_000_000.0
    _job(tier, "sft/chain.tsv", 100, 90, t0 + 100)
    _job(tier, "train/grpo/chain/bf16/none/seed0.tsv", 300, 280, t0 + 400)  # starts at 100
    _job(tier, "train/grpo/chain/fp8/tensorwise/seed0.tsv", 350, 300, t0 + 460)  # starts at 110
    _job(tier, "report/report.tsv", 20, 18, t0 + 490)
    dt = _load()
    out = dt.summarize(dt.job_records(tier))
    assert out["rules"]["train"] == {"jobs": 2, "seconds_summed": 650.0, "cpu_seconds_summed": 580.0,
                                     "span_seconds": 360.0}  # fmt: skip
    assert out["rules"]["sft"]["span_seconds"] == 100.0 and out["span_seconds"] == 490.0
    assert dt.main([str(tier), "--json", str(tmp_path / "rec.json")]) == 0
    record = json.loads((tmp_path / "rec.json").read_text())
    assert record["rules"] == out["rules"] and record["provenance"]["git_commit"]
    assert "8.2 min" in capsys.readouterr().out


def test_a_tier_without_records_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no Snakemake benchmark records"):
        _load().job_records(tmp_path / "smoke")
