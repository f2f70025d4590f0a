"""benchmarks/step_profile.py sorts profiled ops into the categories its bound is computed from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    sys.path.insert(0, str(BENCH))  # step_profile imports its sibling vs_trl
    try:
        spec = importlib.util.spec_from_file_location("step_profile", BENCH / "step_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_ops_fall_into_gemm_attention_other_or_none():
    sp = _load()
    assert [sp.category(op) for op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm")] == [
        "gemm"
    ] * 4
    for op in ("aten::_scaled_dot_product_flash_attention_for_cpu",
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
               "aten::scaled_dot_product_attention"):  # fmt: skip
        assert sp.category(op) == "attn"
    # wrappers whose self time is tiny still count as `other`; only non-aten entries are dropped
    assert sp.category("aten::copy_") == sp.category("aten::matmul") == "other"
    assert sp.category("_BF16LinearFnBackward") is None
    assert sp.category("Optimizer.step#AdamW.step") is None


def test_a_shape_row_reports_both_ratios():
    sp = _load()
    ours = {"wall": 1.0, "gemm": 0.4, "attn": 0.1, "other": 0.3}
    theirs = {"wall": 1.5, "gemm": 0.5, "attn": 0.1, "other": 0.6}
    row = sp.line("L2 h128 t1 n8", ours, theirs)
    assert row.split()[-2:] == ["1.50x", "3.00x"]  # TRL/us = 1.5 / 1.0, TRL/dense = 1.5 / (0.4 + 0.1)


def test_the_window_records_from_its_first_step_to_the_end_of_its_last():
    import torch

    sp = _load()
    window = sp.StepWindow(first=2, last=3)
    a = torch.randn(64, 64)
    window.step_begins(1)
    a @ a  # step 1: before the window
    window.step_ends(1)
    assert not window.started
    for step in (2, 3):
        window.step_begins(step)
        a @ a
        window.step_ends(step)
    assert window.stopped
    a @ a  # after the window: not recorded
    calls = [ev.count for ev in window.prof.key_averages() if ev.key == "aten::mm"]
    assert calls == [2]
    per_step = window.per_step(2)
    assert per_step["wall"] > 0 and per_step["gemm"] > 0
    assert set(per_step) == {"wall", "gemm", "attn", "other"}
