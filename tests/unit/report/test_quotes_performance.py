"""The speed figures README and docs/performance.md quote come from the record `benchmarks/vs_trl.py
--json` writes: built here with the benchmark's own `shape_record` / `write_record`."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fp8rl.quotes.benchmarks import performance_grid, performance_packing, performance_summary
from fp8rl.quotes.registry import QuoteError

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "vs_trl.py"


def _vs_trl():
    spec = importlib.util.spec_from_file_location("vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_trl"] = module  # its dataclasses resolve their module while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def published(tmp_path):
    vt = _vs_trl()
    medians = {
        vt.Shape(2, 128, 1, 8): {"bf16": 0.10, "bf16-repro": 0.15, "fp8": 0.13, "fp8-block": 0.22,
                                 "trl-fp32": 0.21, "trl-bf16": 0.25},
        vt.Shape(4, 256, 2, 32): {"bf16": 0.50, "bf16-repro": 0.90, "fp8": 0.55, "fp8-block": 1.20,
                                  "trl-fp32": 1.30, "trl-bf16": 0.75},
    }  # fmt: skip
    record = {"benchmark": "vs_trl", "command": ["benchmarks/vs_trl.py"], "steps": 3, "repeats": 2,
              "runs": list(medians[vt.Shape(2, 128, 1, 8)]), "load_average_start": (0.5, 0.4, 0.3),
              "shapes": [vt.shape_record(s, m) for s, m in medians.items()]}  # fmt: skip
    vt.write_record(tmp_path / "benchmarks" / "vs_trl.json", record)
    return tmp_path


def test_the_summary_gives_each_ratio_s_range_and_whether_its_target_holds(published):
    text = performance_summary(published)
    assert "Over 2 shapes of `benchmarks/vs_trl.py`" in text
    # TRL's faster mode: 0.21 (fp32) / 0.10 and 0.75 (bf16) / 0.50
    assert "faster than TRL's faster mode by 1.50–2.10× (target ≥ 2: not met)" in text
    assert "FP8 tensorwise step costs 1.10–1.30× the bf16 one (target ≤ 1.2: not met)" in text
    assert "FP8 blockwise step costs 2.20–2.40× the bf16 one (target ≤ 1.2: not met)" in text
    assert "reproducible bf16 step costs 1.50–1.80× the fast one" in text
    assert "1-minute load average 0.50 at the start" in text and "3 timed steps, median of 2" in text
    # the CPU and its ISA, as the record's provenance has them (the fast mode's kernels depend on them)
    cpu = json.loads((published / "benchmarks" / "vs_trl.json").read_text())["provenance"]["numerics"]["cpu"]
    assert f"of an {cpu['model']} ({', '.join(cpu['isa'])})" in text


def test_the_grid_has_one_row_per_shape_with_trl_s_faster_mode(published):
    rows = [line for line in performance_grid(published).splitlines() if line.startswith("| L")]
    assert rows == [
        "| L2 h128 t1 n8 | 0.100 | 0.210 (fp32) | 2.10 | 1.30 | 2.20 | 1.50 |",
        "| L4 h256 t2 n32 | 0.500 | 0.750 (bf16) | 1.50 | 1.10 | 2.40 | 1.80 |",
    ]


def test_a_missing_record_is_named(tmp_path):
    with pytest.raises(QuoteError, match=r"benchmarks/vs_trl.json: not published"):
        performance_summary(tmp_path)


def test_the_packing_figure_is_the_padded_over_the_packed_bf16_step(tmp_path):
    vt = _vs_trl()
    medians = {vt.Shape(2, 128, 1, 8): {"bf16": 0.10, "bf16-padded": 0.12},
               vt.Shape(4, 256, 2, 32): {"bf16": 0.50, "bf16-padded": 0.70}}  # fmt: skip
    record = {"benchmark": "vs_trl", "command": ["benchmarks/vs_trl.py"], "steps": 3, "repeats": 2,
              "runs": ["bf16", "bf16-padded"], "load_average_start": (0.5, 0.4, 0.3),
              "shapes": [vt.shape_record(s, m) for s, m in medians.items()]}  # fmt: skip
    vt.write_record(tmp_path / "benchmarks" / "vs_trl_packing.json", record)
    text = performance_packing(tmp_path)
    assert (
        "Over 2 shapes of `benchmarks/vs_trl.py`, the bf16 step on the padded layout takes 1.20–1.40×" in text
    )
    record["shapes"] = [vt.shape_record(vt.Shape(2, 128, 1, 8), {"bf16": 0.1})]
    vt.write_record(tmp_path / "benchmarks" / "vs_trl_packing.json", record)
    with pytest.raises(QuoteError, match="no shape ran both"):
        performance_packing(tmp_path)


def test_the_repro_figure_is_the_reproducible_over_the_fast_step_per_thread_count(tmp_path):
    from fp8rl.quotes.benchmarks import performance_repro

    vt = _vs_trl()

    def write(name, medians):
        record = {"benchmark": "vs_trl", "command": ["benchmarks/vs_trl.py"], "steps": 5, "repeats": 2,
                  "runs": ["bf16", "bf16-repro"], "load_average_start": (0.5, 0.4, 0.3),
                  "shapes": [vt.shape_record(s, m) for s, m in medians.items()]}  # fmt: skip
        vt.write_record(tmp_path / "benchmarks" / name, record)

    write("vs_trl_repro.json", {vt.Shape(2, 128, 1, 8): {"bf16": 0.10, "bf16-repro": 0.12},
                                vt.Shape(2, 128, 2, 8): {"bf16": 0.08, "bf16-repro": 0.14}})  # fmt: skip
    text = performance_repro(tmp_path)
    assert "| L2 h128 t2 n8 | 0.080 | 0.140 | 1.75 |" in text
    assert "costs 1.20–1.75× the fast one (at 1 thread 1.20×, at 2 threads 1.75×; target ≤ 1.5" in text
    assert "on every shape: not met)" in text and "Before" not in text
    write("vs_trl_repro_spinning.json", {vt.Shape(2, 128, 2, 8): {"bf16": 0.10, "bf16-repro": 1.80}})
    assert "Before (OpenBLAS's threads spinning between products), over 1 shape of" in performance_repro(
        tmp_path
    )
    assert "at 2 threads 18.00×" in performance_repro(tmp_path)
