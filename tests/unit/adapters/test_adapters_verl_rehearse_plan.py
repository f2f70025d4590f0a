"""What the rehearsal runs and skips, without verl: the job types it picks, the preflight's rehearsal mode,
the command's usage errors and the GPU boundary's hook (fp8rl.adapters.verl_rehearse, rehearsal_hook).
The rehearsal itself runs in the verl environment (test_adapters_verl_rehearse.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fp8rl.adapters import preflight
from fp8rl.adapters.verl_overrides import VerlPaths, verl_overrides
from fp8rl.adapters.verl_rehearse import job_types
from fp8rl.cli import main
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PATHS = VerlPaths("/b", "/t.parquet", "/v.parquet", "/r")


def test_job_types_cover_every_cell_kind_and_every_model():
    cfg = load_config(ROOT / "config" / "paper.yaml")
    picked = job_types(cfg)
    kind = lambda s: (s.algo, s.variant, s.granularity)  # noqa: E731
    keys = lambda spec: tuple(o.split("=", 1)[0] for o in verl_overrides(cfg, spec, PATHS))  # noqa: E731
    assert {kind(s) for s in picked} == {kind(s) for s in cfg.runs()}
    assert {keys(s) for s in picked} == {keys(s) for s in cfg.runs()}
    assert {s.model for s in picked} == set(cfg.matrix.models)
    assert (
        len(picked) == 20
    )  # of 162: 2 algorithms x (bf16 + 4 FP8 variants x 2 granularities), 2 models more


def test_the_preflight_skips_only_the_gpu_nodes_checks_in_a_rehearsal(tmp_path):
    block = ["+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_recipe=blockwise",
             "actor_rollout_ref.rollout.quantization=fp8"]  # fmt: skip
    cpu = {
        "cuda": None,
        "capability": None,
        "vllm": None,
        "flash_attn": False,
        "environ": {},
        "modules": None,
    }
    assert len(preflight.problems(block, cpu)) == 3  # CUDA build, vLLM, flash-attn (verl's default)
    rehearsal = {k: v for k, v in cpu.items() if k not in preflight.NODE_KEYS}
    assert preflight.problems(block, rehearsal) == []
    clash = {**rehearsal, "environ": {"NVTE_FLASH_ATTN": "0"}}  # not the node's: still checked
    assert any("NVTE_FLASH_ATTN=0" in p for p in preflight.problems(block, clash))


def test_rehearse_refuses_an_unknown_run(capsys):
    assert main(["verl", "rehearse", "--config", str(ROOT / "config/paper.yaml"), "--run", "x/y"]) == 2
    assert "run id" in capsys.readouterr().err


def test_the_hook_is_inert_unless_rehearsing():
    """Copied as sitecustomize into every process of a rehearsed job; anywhere else it does nothing."""
    code = "import sys, fp8rl.adapters.rehearsal_hook as h; print(any(isinstance(f, h.BoundaryFinder) for f in sys.meta_path))"
    for value, want in (("", "False"), ("1", "True")):
        out = subprocess.run([sys.executable, "-c", code], env={"FP8RL_REHEARSAL": value, "PATH": ""},
                             capture_output=True, text=True, cwd=ROOT, check=True).stdout  # fmt: skip
        assert out.strip() == want


def test_a_step_past_the_marker_that_fails_fails_the_rehearsal(tmp_path):
    from fp8rl.adapters.verl_rehearse import Rehearsal, Step

    passed = Step("dp_update", True, "2 ranks")
    failed = Step("tokenizer", False, "'list' object has no attribute 'keys'")
    ok = Rehearsal("r", True, "T", 8, 0, tmp_path / "log", (passed,))
    bad = Rehearsal("r", True, "T", 8, 0, tmp_path / "log", (passed, failed))
    assert ok.ok and not bad.ok
    assert "after the GPU point, dp_update: passed (2 ranks)" in bad.line()
    assert "after the GPU point, tokenizer: FAILED ('list' object" in bad.line()
    assert not Rehearsal("r", False, None, None, 1, tmp_path / "log").ok


def test_the_dp_step_takes_the_jobs_batch_shape_from_its_overrides():
    """The 32B job: 4 nodes x 8 GPUs over TP 8 is DP 4; a mini-batch of 32 prompts x 16 responses is 128
    sequences per rank; dynamic batch size with the token budget scaled as the response length."""
    from fp8rl.adapters.verl_rehearse import LENGTH_SCALE, dp_case

    cfg = load_config(ROOT / "config" / "paper.yaml")
    spec = RunSpec.parse("dapo/qwen2.5-32b/fp8_tis_calib/blockwise/seed0")
    overrides = dict(o.split("=", 1) for o in verl_overrides(cfg, spec, PATHS))
    case, dp = dp_case(overrides)
    assert dp == 4 and case["mini"] == 128 and case["micro"] is None
    assert case["loss"] == "calibrated_clip"
    assert case["actor"]["use_dynamic_bsz"] is True
    assert case["actor"]["max_token_len_per_gpu"] == 45056 // LENGTH_SCALE
    assert case["groups"]["max_len"] == 20480 // LENGTH_SCALE and case["groups"]["n"] == 16
    assert case["actor"]["clip_ratio_c"] == 10.0
    assert case["groups"]["rollout_is_threshold"] == 2.0  # TIS: the loss gets verl's truncated weights
    bf16 = dict(
        o.split("=", 1) for o in verl_overrides(cfg, RunSpec.parse("grpo/qwen3-8b/bf16/none/seed0"), PATHS)
    )
    assert "rollout_is_threshold" not in dp_case(bf16)[0]["groups"]
