"""The numerics figures README.md and docs/performance.md quote: which kernel path each published tier's
runs took (from the runs' record in report.json, or the publication's provenance where that record is
older), and what the pin costs, from a record `benchmarks/gemm_paths.py --json` writes itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fp8rl import numerics
from fp8rl.quotes.benchmarks import numerics_pins, performance_gemm_paths
from fp8rl.quotes.registry import QuoteError

ROOT = Path(__file__).resolve().parents[3]


def _tier(published: Path, name: str, runs: dict, publish_env: dict) -> None:
    """A published tier as `fp8rl publish` lays it out: report.json's runs record, provenance.json's
    numerics of the publishing process."""
    tier = published / name
    tier.mkdir(parents=True)
    (tier / "report.json").write_text(json.dumps({"numerics": runs}))
    prov = {"published": "2026-12-03 01:51:17 UTC", "numerics": {"mode": "reproducible", "env": publish_env}}
    (tier / "provenance.json").write_text(json.dumps(prov))


def test_each_tier_is_set_against_todays_pin(tmp_path):
    old_pin = {**numerics.PINNED_ENV, "MKL_CBWR": "AVX2,STRICT"}
    today = numerics.PINNED_ENV["MKL_CBWR"]
    xeon, epyc = ["Intel(R) Xeon(R) Processor"], ["AMD EPYC"]
    gemms = ["OpenBLAS Haswell"]
    _tier(
        tmp_path,
        "ci",
        {"modes": ["reproducible"], "cpus": xeon, "mkl": [today], "gemms": gemms},
        numerics.PINNED_ENV,
    )
    # COMPATIBLE with every GEMM on MKL: the pin before the OpenBLAS kernel
    _tier(
        tmp_path,
        "mechanism",
        {"modes": ["reproducible"], "cpus": xeon, "mkl": [today], "gemms": ["MKL"]},
        numerics.PINNED_ENV,
    )
    _tier(tmp_path, "stress", {"modes": ["reproducible"], "cpus": epyc}, old_pin)  # before runs named MKL
    _tier(tmp_path, "attribution", {"modes": ["reproducible"], "cpus": xeon, "mkl": ["AVX2,STRICT"]}, numerics.PINNED_ENV)  # fmt: skip
    _tier(tmp_path, "smoke_unpinned", {"modes": ["fast"], "cpus": xeon, "mkl": ["auto"]}, numerics.PINNED_ENV)
    rows = {line.split(" | ")[0].strip("| `"): line for line in numerics_pins(tmp_path).splitlines()[2:]}
    assert "today's pin: reproduces on Intel CPUs with AVX2, not across vendors" in rows["ci"]
    assert f"`{today}`" in rows["ci"]
    assert "OpenBLAS Haswell" in rows["ci"]
    assert "the pin before the OpenBLAS kernel" in rows["mechanism"] and "| MKL |" in rows["mechanism"]
    # the runs' own record wins over the publishing process's pin
    assert "an earlier pin" in rows["attribution"] and "`AVX2,STRICT`" in rows["attribution"]
    # an older report: the branch from provenance
    assert "an earlier pin" in rows["stress"] and "AMD EPYC" in rows["stress"]
    assert "`fast` mode: that machine's own kernels" in rows["smoke_unpinned"]
    assert list(rows) == ["attribution", "ci", "mechanism", "smoke_unpinned", "stress"]


def test_the_pin_cost_comes_from_a_record_the_benchmark_wrote(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gemm_paths", ROOT / "benchmarks" / "gemm_paths.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "SHAPES", ((16, 32, 48), (64, 32, 16)))  # two small shapes: seconds
    out = tmp_path / "benchmarks" / "gemm_paths.json"
    assert bench.main(["--threads", "1", "--rounds", "1", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert next(iter(record["paths"])) == record["pin"] and record["paths"][record["pin"]]["pinned_blas"]
    text = performance_gemm_paths(tmp_path)
    pin, compat = record["gflops"]["1"][record["pin"]], record["gflops"]["1"]["COMPATIBLE,STRICT"]
    lo, hi = (
        min(a / p for a, p in zip(compat, pin, strict=True)),
        max(a / p for a, p in zip(compat, pin, strict=True)),
    )
    assert f"at 1 thread: {lo:.2f}–{hi:.2f}× the time of `COMPATIBLE,STRICT`'s" in text
    assert "OpenBLAS's `Haswell` kernel" in text
    assert "over 2 shapes" in text and "Measured at commit" in text


def test_a_record_whose_first_path_is_not_the_pin_is_refused(tmp_path):
    path = tmp_path / "benchmarks" / "gemm_paths.json"
    path.parent.mkdir()
    record = {
        "pin": "pinned OpenBLAS",
        "paths": {"AUTO": {"mkl_cbwr": "AUTO", "pinned_blas": False}},
        "gflops": {"1": {"AUTO": [2.0]}},
    }
    path.write_text(json.dumps(record))
    with pytest.raises(QuoteError, match="is not the pinned OpenBLAS kernel"):
        performance_gemm_paths(tmp_path)
