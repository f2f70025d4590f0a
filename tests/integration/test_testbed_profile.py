"""benchmarks/testbed_profile.py as a user runs it: its categories sum to the profiled ops' time, its
bounds are Amdahl's, and the quoted block docs/performance.md shows is generated from its real record."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.config_loader import load_config
from fp8rl.quotes.step import performance_testbed_profile

REPO = Path(__file__).resolve().parents[2]


def _module():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "testbed_profile", REPO / "benchmarks" / "testbed_profile.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


@pytest.mark.parametrize(
    "op, want",
    [("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::_scaled_dot_product_flash_attention_for_cpu", "attn"),
     ("aten::multinomial", "draw"), ("aten::searchsorted", "draw"), ("aten::mul", "other"),
     ("aten::mm_backward_custom", "other")],
)  # fmt: skip
def test_ops_fall_into_their_categories(op, want):
    assert _module().category(op) == want


def test_bounds_are_amdahls():
    m = _module()
    got = m.bounds({"wall_s": 10.0, "self_s": {"gemm": 5.0, "attn": 1.0, "draw": 2.0, "other": 1.5}})
    assert got["gemm"] == pytest.approx(2.0) and got["draw"] == pytest.approx(1.25)
    assert got["gemm+attn+draw"] == pytest.approx(5.0)


def test_record_and_quoted_block(tier, tmp_path):
    root, config, _ = tier
    cfg = load_config(config)
    runs = [
        next(r.run_id for r in cfg.runs() if r.algo == "grpo" and r.variant == v) for v in ("bf16", "fp8_tis")
    ]
    record_path = tmp_path / "published" / "benchmarks" / "testbed_profile_longform.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "testbed_profile.py"), "--config", str(config), "--runs", *runs,
         "--base", str(root / "base" / "tiny"), "--data", str(root / "data"), "--steps", "1", "--noise-scale",
         "1.0", "--json", str(record_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(record_path.read_text())
    assert list(record["runs"]) == runs
    for result in record["runs"].values():
        assert result["self_s"]["gemm"] > 0 and result["self_s"]["other"] > 0
        assert sum(result["self_s"].values()) <= result["wall_s"] * 1.05  # self times do not double count
        assert result["bound"]["gemm+attn+draw"] >= result["bound"]["gemm"] > 1.0
    block = performance_testbed_profile(tmp_path / "published")
    assert all(f"`{r}`" in block for r in runs)
    for run, result in record["runs"].items():
        assert f"{result['bound']['gemm+attn+draw']:.2f}× faster for `{run}`" in block
    assert "target is out of reach" in block or "only if they became nearly free" in block
