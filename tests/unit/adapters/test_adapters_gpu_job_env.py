"""The CPU numerics pin (fp8rl.numerics: `import fp8rl` sets it in reproducible mode) stays out of the
paper tier's GPU processes: vLLM's engine and workers under lm-eval, bfcl's `generate`/`evaluate` (and
the `vllm serve` it starts), while the eval process itself and a CPU tier's `hf` model keep it. The train
job script's processes: tests/unit/adapters/test_adapters_verl_cluster.py; the agent eval's `vllm serve`
in the bfcl image's packages: the eval-agent rehearsal (image_rehearse_agent.pin_leak)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fp8rl import numerics
from fp8rl.adapters.image_rehearse_agent import pin_leak
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PIN_KEYS = (*numerics.PINNED_ENV, *numerics.REPRODUCIBLE_RUNTIME_ENV)


@pytest.fixture
def pinned(monkeypatch):
    """This process's environment in reproducible mode, with one variable the user set themselves."""
    for key, value in numerics.environment("reproducible", {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")  # the user's own, not the pin's


def _no_pin(env) -> None:
    assert env[numerics.ENV_MODE] == "fast"
    assert pin_leak(env) == {}, pin_leak(env)
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE"


def test_unpinned_drops_the_pins_values_and_keeps_the_users(pinned):
    env = numerics.unpinned(os.environ)
    _no_pin(env)
    assert pin_leak(dict(os.environ))  # this process itself stays pinned
    assert "OPENBLAS_THREAD_TIMEOUT" not in env


def test_bfcl_and_the_vllm_server_it_starts_get_no_pin(pinned, monkeypatch, tmp_path):
    from fp8rl.evaluate import bfcl

    seen = []
    monkeypatch.setattr(bfcl.subprocess, "run", lambda argv, check, env: seen.append((argv[1], env)))
    monkeypatch.setattr(bfcl, "find_bfcl", lambda: "bfcl")
    monkeypatch.setattr(bfcl, "bfcl_model_name", lambda cfg, checkpoint: "Qwen/Qwen3-8B")
    monkeypatch.setattr(bfcl, "read_scores", lambda root, names: [])
    cfg = load_config(ROOT / "config" / "paper.yaml")
    bfcl.run_bfcl(cfg, tmp_path / "checkpoint", ["simple"], tmp_path / "bfcl")
    assert [cmd for cmd, _ in seen] == ["generate", "evaluate"]
    for _, env in seen:
        _no_pin(env)
        assert env["BFCL_PROJECT_ROOT"] == str(tmp_path / "bfcl")


@pytest.mark.parametrize(("model", "pin_in_children"), [("fp8rl-vllm", False), ("hf", True)])
def test_lm_evals_vllm_model_starts_its_workers_without_the_pin(
    pinned, monkeypatch, tmp_path, model, pin_in_children
):
    """lm-eval builds vLLM in this process, and vLLM starts its engine and GPU workers as child processes
    with this process's environment: what `simple_evaluate` sees is what they get. The reference
    backend's `hf` model computes in this process, on the CPU tiers: its environment keeps the pin."""
    import lm_eval

    from fp8rl.evaluate import lm_eval_runner

    seen = {}
    monkeypatch.setattr(lm_eval_runner, "build_tasks", lambda cfg, plan: ([], None))
    monkeypatch.setattr(lm_eval_runner, "model_spec", lambda cfg, checkpoint: (model, {}))
    monkeypatch.setattr(lm_eval_runner, "has_chat_template", lambda checkpoint: False)
    monkeypatch.setattr(lm_eval, "simple_evaluate", lambda **kw: seen.update(os.environ) or None)
    before = dict(os.environ)
    cfg = load_config(ROOT / "config" / "paper.yaml")
    assert lm_eval_runner.run_lm_eval(cfg, tmp_path, None) == []
    if pin_in_children:
        assert pin_leak(seen) == pin_leak(before) != {}
    else:
        _no_pin(seen)
    assert dict(os.environ) == before  # put back after
