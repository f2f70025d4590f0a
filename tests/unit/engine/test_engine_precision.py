"""setup_precision: each run's policy gets its own FP8Runtime, and throughput.json counts that one."""

from __future__ import annotations

from pathlib import Path

import torch

from fp8rl.config import ArchConfig
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.engine.model import build_model
from fp8rl.engine.phase_timer import throughput_report
from fp8rl.engine.precision import setup_precision
from fp8rl.engine.tokenizer import build_char_tokenizer

ROOT = Path(__file__).resolve().parents[3]
ARCH = ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _train_step(prec, tok) -> None:
    ids = torch.tensor([tok("12+45=57")["input_ids"]])
    prec.policy(ids, labels=ids).loss.backward()


def test_two_runs_keep_separate_gemm_counts():
    cfg = load_config(ROOT / "config/smoke.yaml")
    tok = build_char_tokenizer()
    a = setup_precision(build_model(ARCH, tok, seed=0), cfg, RunSpec("grpo", "tiny", "fp8", "tensorwise", 0))
    b = setup_precision(build_model(ARCH, tok, seed=1), cfg, RunSpec("grpo", "tiny", "fp8", "blockwise", 0))
    assert a.runtime is not b.runtime
    _train_step(a, tok)
    _train_step(a, tok)
    layers = 7  # q, k, v, o, gate, up, down of the one block (embeddings and lm_head stay high precision)
    assert a.runtime.gemms.counts() == {"emulated": 2 * 3 * layers, "scaled_mm": 0}
    assert b.runtime.gemms.counts() == {"emulated": 0, "scaled_mm": 0}
    assert throughput_report([], a)["fp8_gemms"] == {"emulated": 42, "scaled_mm": 0}
    assert throughput_report([], b)["fp8_gemms"] == {"emulated": 0, "scaled_mm": 0}
    bf16 = setup_precision(build_model(ARCH, tok, seed=0), cfg, RunSpec("grpo", "tiny", "bf16", "none", 0))
    assert "fp8_gemms" not in throughput_report([], bf16)


def test_throughput_says_how_each_models_gemms_ran():
    cfg = load_config(ROOT / "config/smoke.yaml")
    tok = build_char_tokenizer()
    fp8 = setup_precision(build_model(ARCH, tok, seed=0), cfg, RunSpec("grpo", "tiny", "fp8", "blockwise", 0))
    assert throughput_report([], fp8)["gemms"] == {
        "policy": "fp8 blockwise emulated",
        "rollout": "fp8 blockwise emulated",
        "shadow": "bf16-emulated",
        "embeddings_lm_head": "fp32",
    }
    bf16 = setup_precision(build_model(ARCH, tok, seed=0), cfg, RunSpec("grpo", "tiny", "bf16", "none", 0))
    report = throughput_report([], bf16)
    assert report["gemms"]["policy"] == report["gemms"]["rollout"] == "bf16-emulated"  # CPU: emulated
    assert report["emulated"] is True
