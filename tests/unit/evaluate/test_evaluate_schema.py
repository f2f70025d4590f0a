"""The result schema, lm-eval's output normalised into it, and BFCL's score files read into it."""

import json

import pytest
from lm_eval.api.metrics import mean_stderr

from fp8rl.config_loader import validate_config
from fp8rl.evaluate import bfcl
from fp8rl.evaluate.eval_tasks import EvalInputError
from fp8rl.evaluate.lm_eval_runner import model_spec
from fp8rl.evaluate.schema import TaskResult, eval_document, normalise_lm_eval, write_eval

# The shape of `lm_eval.simple_evaluate(...)` output for a two-filter task, a one-filter task and a group.
RAW = {
    "results": {
        "gsm8k": {
            "alias": "gsm8k",
            "exact_match,strict-match": 0.25,
            "exact_match_stderr,strict-match": 0.01,
            "exact_match,flexible-extract": 0.5,
            "exact_match_stderr,flexible-extract": "N/A",
        },
        "minerva_math500": {"alias": "x", "exact_match,none": 0.125, "exact_match_stderr,none": 0.02},
        "some_group": {"alias": "g", "acc,none": 0.9, "acc_stderr,none": 0.1},
    },
    "n-samples": {
        "gsm8k": {"original": 1319, "effective": 100},
        "minerva_math500": {"original": 500, "effective": 500},
    },
}


def test_normalise_lm_eval_names_filters_only_when_needed():
    got = normalise_lm_eval(RAW, {"minerva_math500": "math500"})
    assert got == [
        TaskResult("gsm8k", "exact_match,strict-match", 0.25, 0.01, 100),
        TaskResult("gsm8k", "exact_match,flexible-extract", 0.5, None, 100),
        TaskResult("math500", "exact_match", 0.125, 0.02, 500),
    ]


def test_eval_document_round_trips_and_rejects_unknown_suites(tmp_path):
    path = write_eval(tmp_path / "e.json", "ckpt", "agent", [TaskResult("t", "m", 0.5, None, 3)], {"x": 1})
    doc = json.loads(path.read_text())
    assert doc == {
        "checkpoint": "ckpt",
        "suite": "agent",
        "results": [{"task": "t", "metric": "m", "value": 0.5, "stderr": None, "n": 3}],
        "provenance": {"x": 1},
    }
    with pytest.raises(ValueError, match="unknown suite 'lm-eval'"):
        eval_document("c", "lm-eval", [], {})


def test_bfcl_score_files_become_results(tmp_path):
    root = tmp_path / "score" / "Qwen_Qwen3-8B" / "non_live"
    root.mkdir(parents=True)
    (root / "BFCL_v4_simple_python_score.json").write_text(
        json.dumps({"accuracy": 0.9, "correct_count": 360, "total_count": 400})
        + '\n{"id": "simple_python_3"}\n'
    )
    (root / "BFCL_v4_live_simple_score.json").write_text(json.dumps({"accuracy": 0.1, "total_count": 9}))
    (root / "BFCL_v4_parallel_score.json").write_text(json.dumps({"accuracy": 1.0, "total_count": 200}))
    got = bfcl.read_scores(tmp_path / "score", ["simple", "parallel"])
    assert (got[0].task, got[0].metric, got[0].value, got[0].n) == ("bfcl_simple", "ast_accuracy", 0.9, 400)
    # the same standard error lm-eval reports for a mean of 0/1 scores
    assert got[0].stderr == pytest.approx(mean_stderr([1] * 360 + [0] * 40), rel=1e-12)
    assert got[1].task == "bfcl_parallel" and got[1].value == 1.0 and got[1].stderr == 0.0
    with pytest.raises(RuntimeError, match="one score file for 'multiple'"):
        bfcl.read_scores(tmp_path / "score", ["multiple"])


def test_bfcl_missing_and_bad_categories_are_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("FP8RL_BFCL", raising=False)
    monkeypatch.setattr(bfcl, "EVALS_DIR", tmp_path / "evals")
    with pytest.raises(EvalInputError, match=r"pip install 'bfcl-eval"):
        bfcl.find_bfcl()
    with pytest.raises(EvalInputError, match="unknown BFCL category bfcl_java"):
        bfcl.bfcl_categories(["java"])


def test_verl_backend_needs_vllm(tmp_path, monkeypatch):
    import importlib.util

    cfg = validate_config(
        {
            "tier": "paper",
            "backend": "verl",
            "models": [{"name": "m", "source": "hf", "hf_id": "org/m"}],
            "matrix": {"algorithms": ["grpo"], "models": ["m"], "variants": ["bf16"], "seeds": [0]},
        }
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(EvalInputError, match="'vllm' model, but vllm is not installed"):
        model_spec(cfg, tmp_path)
