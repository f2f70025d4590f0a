"""A paper run's chain of jobs through verl's own checkpoint code (fp8rl.adapters.verl_rehearse_ckpt): a
job killed at its time limit and resumed by the next equals an uninterrupted run step for step, and the
chain fails when the resumed job loses what the save holds (run in the verl environment: conftest.py;
minutes: each chain is three jobs, each composing verl's config and building its dataset)."""

from __future__ import annotations

import sys
from pathlib import Path

from fp8rl.adapters import verl_rehearse_ckpt
from fp8rl.adapters.verl_rehearse import stand_in_data, stand_in_model
from fp8rl.adapters.verl_run import verl_paths, write_run_files
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]


def _run_dir(tmp_path: Path, run_id: str) -> tuple[Path, Path]:
    cfg = load_config(ROOT / "config" / "paper.yaml", ["containers.mode=none"])
    cfg = cfg.model_copy(update={"hub": cfg.hub.model_copy(update={"home": str(tmp_path / "hf_home")})})
    spec = RunSpec.parse(run_id)
    base = stand_in_model(tmp_path / "base", "qwen3")
    out = tmp_path / "run"
    write_run_files(cfg, spec, verl_paths(cfg, spec, out, base), data=stand_in_data(tmp_path / "data"),
                    host_python=sys.executable)  # fmt: skip
    return out, base


def test_a_killed_dapo_job_resumes_as_if_it_had_not_stopped(tmp_path, verl_site):
    """DAPO's exact refill (one prompt per dataloader fetch), save_freq 1: the second job resumes at
    step 2, at the first epoch's end, and draws the second epoch's first batch as the uninterrupted run."""
    out, base = _run_dir(tmp_path, "dapo/qwen3-8b/bf16/none/seed0")
    ok, detail = verl_rehearse_ckpt.rehearse_chain(out, tmp_path / "chain", base)
    assert ok, detail
    assert "the second resumed at step 2" in detail and "saves left [2, 3]" in detail
    work = tmp_path / "chain"
    assert (work / "verl_checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (work / "verl_checkpoints" / "global_step_2" / "data.pt").is_file()  # verl's dataloader state


def test_a_resumed_job_without_the_dataloader_state_fails_the_chain(tmp_path, verl_site, monkeypatch):
    """The check has teeth: the save's `data.pt` lost before the second job, verl starts the dataloader
    from scratch and step 3 draws the first epoch's batch again."""
    out, base = _run_dir(tmp_path, "grpo/qwen3-8b/bf16/none/seed0")
    prune = verl_rehearse_ckpt._prune

    def prune_and_lose_the_dataloader_state(script: Path, ckpt: Path) -> None:
        prune(script, ckpt)
        for path in ckpt.glob("global_step_*/data.pt"):
            path.unlink()

    monkeypatch.setattr(verl_rehearse_ckpt, "_prune", prune_and_lose_the_dataloader_state)
    ok, detail = verl_rehearse_ckpt.rehearse_chain(out, tmp_path / "chain", base)
    assert not ok and "step 3: uninterrupted" in detail, detail


def _needs_megatron_sources(tmp_path: Path) -> None:
    import pytest

    from fp8rl.adapters.verl_rehearse_megatron import megatron_site

    if megatron_site(tmp_path / "site") is None:
        pytest.skip("no megatron-core sources (scripts/upstream_src.sh makes build/upstream)")


def test_a_killed_job_resumes_through_verls_megatron_checkpoint_manager(tmp_path, verl_site):
    """The paper's layout: verl's MegatronCheckpointManager writes each save (its manifest, the bridge's
    Hugging Face tree, megatron-core dist_ckpt for the optimizer and RNG), retains within each job, and
    the resumed job loads it; the script's pruning leaves two saves and the last one exports."""
    _needs_megatron_sources(tmp_path)
    out, base = _run_dir(tmp_path, "grpo/qwen3-8b/fp8_tis/blockwise/seed0")
    ok, detail = verl_rehearse_ckpt.rehearse_chain(out, tmp_path / "chain", base, megatron=True)
    assert ok, detail
    assert "Megatron checkpoint manager" in detail and "saves left [2, 3]" in detail
    assert "its retention kept [2, 3] in the second job" in detail  # the first job's step 1 counted too
    actor = tmp_path / "chain" / "verl_checkpoints" / "global_step_3" / "actor"
    for part in ("ckpt_contents.json", "model/huggingface/model.safetensors", "optimizer/dist_ckpt/metadata.json",
                 "extra/dist_ckpt/metadata.json", "transformer_config.json"):  # fmt: skip
        assert (actor / part).is_file(), part
    assert (tmp_path / "chain" / "checkpoint" / "model.safetensors").is_file()
    # the job's own TransformerConfig (through mbridge), serialised by verl at each save
    import json

    tf = json.loads((actor / "transformer_config.json").read_text())
    assert tf["fp8"] == "e4m3" and tf["fp8_recipe"] == "blockwise" and tf["recompute_granularity"] == "full"


def test_a_save_without_its_optimizer_shards_fails_the_megatron_chain(tmp_path, verl_site, monkeypatch):
    """The check has teeth: the resumed job loads the optimizer through megatron-core's dist_checkpointing,
    so a save that lost `optimizer/dist_ckpt/` stops the second job."""
    _needs_megatron_sources(tmp_path)
    import shutil

    out, base = _run_dir(tmp_path, "grpo/qwen3-8b/fp8_tis/blockwise/seed0")
    prune = verl_rehearse_ckpt._prune

    def prune_and_lose_the_optimizer(script: Path, ckpt: Path) -> None:
        prune(script, ckpt)
        for path in ckpt.glob("global_step_*/actor/optimizer/dist_ckpt"):
            shutil.rmtree(path)

    monkeypatch.setattr(verl_rehearse_ckpt, "_prune", prune_and_lose_the_optimizer)
    try:
        ok, detail = verl_rehearse_ckpt.rehearse_chain(out, tmp_path / "chain", base, megatron=True)
    except RuntimeError as exc:  # the job process's own failure
        ok, detail = False, str(exc)
    assert not ok and "attempt-002" in detail, detail
