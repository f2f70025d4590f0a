"""Score centering on the verl backend is refused at config validation, before any work, by the
variant's `matrix.variants` entry and with what verl 0.9.1 lacks; and the pinned verl still lacks it: the
facts fp8rl.adapters.verl_corrections states are read here from build/verl-site's sources, so a verl that
gains a top-k path fails this test and the refusal is then to be revisited."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.adapters.verl_support import check_verl_support, verl_problems
from fp8rl.cli import main
from fp8rl.commands.config import CONFIG_CHECKS
from fp8rl.config_loader import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
VERL = Path(os.environ.get("FP8RL_VERL_SITE", ROOT / "build" / "verl-site")) / "verl"
SC = "matrix.variants=[bf16, fp8_tis, fp8_scorecenter, fp8_tis_scorecenter]"


def test_config_validate_refuses_score_centering_on_verl_by_its_variant(capsys):
    assert main(["config", "validate", "--config", str(PAPER), "--set", SC]) == 2
    err = capsys.readouterr().err
    assert "matrix.variants.2: fp8_scorecenter: correction 'scorecenter' cannot run on backend 'verl'" in err
    assert "matrix.variants.3: fp8_tis_scorecenter: correction 'tis_scorecenter'" in err
    assert "vLLMHttpServer.generate" in err and "backend 'reference'" in err
    assert "Traceback" not in err


def test_the_config_checks_raise_before_any_run_and_verl_train_refuses_the_run():
    with pytest.raises(ConfigError, match=r"matrix\.variants\.2: fp8_scorecenter"):
        load_config(PAPER, [SC], checks=CONFIG_CHECKS)
    cfg = load_config(PAPER, [SC])
    assert {key for key, _ in verl_problems(cfg)} == {("matrix", "variants", 2), ("matrix", "variants", 3)}
    run = next(r for r in cfg.runs() if r.variant == "fp8_scorecenter")
    with pytest.raises(AdapterError, match=r"^matrix\.variants: fp8_scorecenter") as exc:
        check_verl_support(cfg, run)  # what `fp8rl verl train` runs first
    assert exc.value.key == ("matrix", "variants", 2)
    tis = next(r for r in cfg.runs() if r.variant == "fp8_tis")
    check_verl_support(cfg, tis)  # the rest of the matrix still runs


def _function(path: Path, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    tree = ast.parse(path.read_text())
    return next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    )


@pytest.mark.skipif(not VERL.is_dir(), reason=f"verl's sources are not installed (looked in {VERL})")
def test_the_pinned_verl_still_lacks_the_top_k_inputs():
    assert (VERL / "version" / "version").read_text().strip() == "0.9.1"
    # the rollout: whatever `logprobs` a request carries, vLLM is asked for 0 (the sampled token's) ...
    server = VERL / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
    generate = ast.unparse(_function(server, "generate"))
    assert "sampling_params['logprobs'] = 0 if sampling_params.pop('logprobs', False) else None" in generate
    # ... and only the sampled token's entry is kept
    assert "log_probs = [logprobs[token_ids[i]].logprob for i, logprobs in enumerate(" in generate
    # the trainer: the forward's log-probs are the labels' (top-k only in the distillation branch) ...
    engine = VERL / "workers" / "engine" / "megatron" / "transformer_impl.py"
    head = ast.unparse(_function(engine, "_lm_head_logits_processor"))
    assert "ret['log_probs'] = vocab_parallel_log_probs_from_logits(logits_bak, label)" in head
    assert "if distillation_use_topk:" in head
    # ... and a registered policy loss is called with these arguments only
    ppo = _function(VERL / "workers" / "utils" / "losses.py", "ppo_loss")
    call = next(
        n for n in ast.walk(ppo) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "policy_loss_fn"
    )
    assert {k.arg for k in call.keywords} == {
        "old_log_prob", "log_prob", "advantages", "response_mask", "loss_agg_mode", "config",
        "rollout_is_weights",
    }  # fmt: skip
