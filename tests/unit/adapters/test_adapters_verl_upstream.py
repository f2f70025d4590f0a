"""The paper path through verl 0.9.1's own code on CPU: the composed config through verl's DAPO
reward manager, the checkpoint directory as verl's Megatron checkpoint manager lays it out, and the
attention backend megatron-core and Transformer Engine would use given the train image's lock.

Runs in the verl environment (test_adapters_verl_env.py). The megatron-core and Transformer Engine
sources come from `build/upstream/` (scripts/upstream_src.sh); tests that need them skip without."""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import types
from pathlib import Path
from unittest.mock import MagicMock

import pytest

from fp8rl.adapters.verl_checkpoint import export
from fp8rl.adapters.verl_overrides import CONFIG_NAME, VerlPaths, verl_overrides
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = Path(os.environ.get("FP8RL_UPSTREAM_SRC", ROOT / "build" / "upstream"))
TRAIN_LOCK = ROOT / "containers" / "train" / "requirements.lock"
PATHS = VerlPaths("/models/base", "/run/verl_data/train.parquet", "/run/verl_data/test.parquet", "/run")


@pytest.fixture(scope="module")
def paper():
    return load_config(ROOT / "config" / "paper.yaml")


@pytest.fixture(scope="module")
def compose(verl_site):
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        yield lambda overrides: hydra_compose(config_name=CONFIG_NAME, overrides=overrides)


def _upstream(rel: str) -> Path:
    path = UPSTREAM / rel
    if not path.is_file():
        pytest.skip(f"needs the pinned upstream sources: run scripts/upstream_src.sh (no {path})")
    return path


# ------------------------------------------------------------------------------ DAPO reward manager


class _Tokenizer:
    """decode() of the token ids the test puts in the batch: one character per id."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids)


def _reward(config, response: str, answer: str, max_len: int) -> dict:
    import torch
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

    ids = [ord(c) for c in response]
    responses = torch.tensor([ids + [0] * (max_len - len(ids))])
    mask = torch.tensor([[1] * len(ids) + [0] * (max_len - len(ids))])
    data = DataProto.from_dict(
        tensors={"responses": responses, "attention_mask": mask},
        non_tensors={"data_source": ["math_dapo"], "reward_model": [{"ground_truth": answer}]},
    )
    manager = DAPORewardManager(config, _Tokenizer(), compute_score=None)
    return manager.loop.run_until_complete(manager.run_single(data))  # verl's own event loop


def test_the_dapo_cell_runs_through_verls_dapo_reward_manager(paper, compose):
    spec = RunSpec("dapo", "qwen3-8b", "fp8", "blockwise", 0)
    overrides = verl_overrides(paper, spec, PATHS)
    config = compose(overrides)  # struct mode, as verl's trainer holds it
    assert config.reward.reward_manager.name == "dapo"
    max_len = paper.schedule.max_new_tokens
    got = _reward(config, "The sum is 7.\nAnswer: 42", "42", max_len)
    assert got["reward_score"] == 1.0 and got["reward_extra_info"]["acc"] is True
    assert _reward(config, "Answer: 41", "42", max_len)["reward_score"] == -1.0
    # a response inside the overlong buffer is penalised: expected length max_len - buffer
    buffer = paper.algorithm("dapo").overlong_buffer_len
    long = "x" * (max_len - buffer // 2 - 10) + "Answer: 42"
    assert _reward(config, long, "42", max_len)["reward_score"] < 1.0
    # what the issue saw: without `log` verl's manager raises on the struct config
    from omegaconf.errors import ConfigAttributeError

    without = compose([o for o in overrides if "overlong_buffer_cfg.log" not in o])
    with pytest.raises(ConfigAttributeError, match="log"):
        _reward(without, "Answer: 42", "42", max_len)


# ------------------------------------------------------------------------------------- checkpoints


class _MegatronStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`megatron.*` as empty modules (megatron-core needs CUDA and Python 3.12 wheels): enough to import
    verl's checkpoint manager, whose layout code is plain Python."""

    def find_spec(self, name, path, target=None):
        if name == "megatron" or name.startswith("megatron."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: MagicMock(name=f"{spec.name}.{attr}")
        return module

    def exec_module(self, module):
        if module.__name__ == "megatron.core":
            module.__version__ = "0.19.2"


@pytest.fixture(scope="module")
def checkpoint_manager(verl_site):
    stub = _MegatronStub()
    sys.meta_path.insert(0, stub)
    try:
        from verl.utils.checkpoint.megatron_checkpoint_manager import MegatronCheckpointManager

        yield MegatronCheckpointManager
    finally:
        sys.meta_path.remove(stub)


def test_the_final_checkpoint_comes_from_verls_checkpoint_layout(
    paper, compose, checkpoint_manager, tmp_path
):
    """A save laid out by verl 0.9.1's MegatronCheckpointManager with the paper cell's composed settings
    (no dist checkpointing, mbridge): the job script's export finds the model and writes checkpoint/."""
    spec = RunSpec("grpo", "qwen3-8b", "fp8", "tensorwise", 0)
    actor_cfg = compose(verl_overrides(paper, spec, PATHS)).actor_rollout_ref.actor
    manager = object.__new__(checkpoint_manager)
    manager.checkpoint_save_contents = list(actor_cfg.checkpoint.save_contents)
    manager.checkpoint_load_contents = list(actor_cfg.checkpoint.load_contents)
    manager.use_dist_checkpointing = actor_cfg.megatron.use_dist_checkpointing
    manager.bridge = object() if actor_cfg.megatron.use_mbridge else None
    manager.peft_cls, manager.lr_scheduler, manager.processing_class = None, object(), object()
    manager.role, manager.arch, manager.world_size, manager.rank = "actor", "Qwen3ForCausalLM", 8, 0
    actor = tmp_path / "verl_checkpoints" / "global_step_500" / "actor"
    manager._write_checkpoint_manifest(str(actor), 500, saved_any_dist_ckpt=True)
    manifest = json.loads((actor / "ckpt_contents.json").read_text())
    model = manifest["contents"]["model"]
    assert model["format"] == "huggingface" and not (actor / "model" / "dist_ckpt" / "common.pt").exists()
    # what mbridge writes at that path (weights, config.json by transformers 5: rope_parameters only)
    hf = actor / model["path"]
    hf.mkdir(parents=True, exist_ok=True)
    (hf / "model.safetensors").write_bytes(b"\0" * 8)
    (hf / "config.json").write_text(json.dumps({"model_type": "qwen3", "rope_parameters": {
        "rope_type": "default", "rope_theta": 1000000}}))  # fmt: skip
    (hf / "tokenizer_config.json").write_text("{}")
    out = export(actor, tmp_path / "checkpoint")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    assert json.loads((out / "config.json").read_text())["rope_theta"] == 1000000


# ------------------------------------------------------------------------------- attention backend


def _megatron_env(backend: str) -> dict[str, str]:
    """The NVTE_* variables megatron-core 0.19.2 sets for `backend` (its own `_set_attention_backend`)."""
    src = _upstream("megatron/core/models/common/language_module/language_module.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)
              and n.name == "_set_attention_backend")  # fmt: skip
    enum_src = _upstream("megatron/core/transformer/enums.py").read_text()
    ns: dict = {}
    exec(compile(enum_src, "enums.py", "exec"), ns)
    environ: dict[str, str] = {}
    fake_os = types.SimpleNamespace(getenv=environ.get, environ=environ)
    exec(compile(ast.Module([fn], []), "language_module.py", "exec"), {"os": fake_os, **ns}, ns)
    self = types.SimpleNamespace(config=types.SimpleNamespace(
        attention_backend=ns["AttnBackend"][backend], flash_attention_version=None))  # fmt: skip
    with contextlib.suppress(AttributeError):  # the FlashAttention-version pinning after the backend flags
        ns["_set_attention_backend"](self)
    return environ


def _locked(lock: Path) -> set[str]:
    return {
        m.group(1).lower().replace("_", "-")
        for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", lock.read_text(), re.M)
    }


def test_the_attention_backend_is_one_the_train_image_has(paper, compose):
    spec = RunSpec("grpo", "qwen3-8b", "fp8", "blockwise", 0)
    te_cfg = compose(
        verl_overrides(paper, spec, PATHS)
    ).actor_rollout_ref.actor.megatron.override_transformer_config
    backend = te_cfg.attention_backend
    env = _megatron_env(backend)
    # Transformer Engine 2.19 finds FlashAttention only through these distributions
    backends_src = _upstream(
        "transformer_engine/pytorch/attention/dot_product_attention/backends.py"
    ).read_text()
    flash_dists = set(re.findall(r'get_pkg_version\("(flash-attn[^"]*)"\)', backends_src))
    assert flash_dists >= {"flash-attn", "flash-attn-3", "flash-attn-4"}
    locked = _locked(TRAIN_LOCK)
    available = {
        "flash": env.get("NVTE_FLASH_ATTN") == "1" and bool(flash_dists & locked),
        "fused": env.get("NVTE_FUSED_ATTN") == "1"
        and {"nvidia-cudnn-cu13", "transformer-engine-cu13"} <= locked,
        "unfused": env.get("NVTE_UNFUSED_ATTN") == "1",
    }
    assert available["fused"] and not available["unfused"], (backend, env)
    # verl's own default would leave nothing: flash only, and no flash-attn in the lock
    default = _megatron_env("flash")
    assert default == {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}
    assert not flash_dists & locked
    # activation recompute reaches Megatron
    assert te_cfg.recompute_granularity == "full" and te_cfg.recompute_num_layers == 1


# ------------------------------------------------------------------------------ Megatron engine configs


def _engine(
    paper, tmp_path: Path, run_id: str, extra: tuple[str, ...] = (), shape: tuple[int, int, int] | None = None
) -> tuple[bool, str]:
    """The engine step of `run_id`'s job on a stand-in of its model with the hub model's attention heads,
    KV heads and layers (or `shape`)."""
    from fp8rl.adapters.rehearsal_stand_ins import HUB_SHAPES, model_family
    from fp8rl.adapters.verl_launch import OVERRIDES_FILE
    from fp8rl.adapters.verl_rehearse import stand_in_model
    from fp8rl.adapters.verl_rehearse_engine import engine_step

    _upstream("mbridge/__init__.py")
    hf_id = paper.model(RunSpec.parse(run_id).model).hf_id
    base = stand_in_model(tmp_path / "base", model_family(hf_id), shape or HUB_SHAPES[hf_id])
    paths = VerlPaths(str(base), PATHS.train_files, PATHS.val_files, str(tmp_path / "run"))
    out = Path(paths.out)
    out.mkdir()
    overrides = [*verl_overrides(paper, RunSpec.parse(run_id), paths), *extra]
    (out / OVERRIDES_FILE).write_text(json.dumps({"overrides": overrides}))
    return engine_step(out, base)


@pytest.mark.parametrize(
    "run_id, want",
    [
        ("grpo/qwen3-8b/bf16/none/seed0", "'fp8': None"),
        ("dapo/qwen3-14b/fp8/tensorwise/seed0", "'fp8': 'hybrid', 'fp8_recipe': 'tensorwise'"),
        ("grpo/qwen2.5-32b/fp8_tis/blockwise/seed0", "'fp8': 'e4m3', 'fp8_recipe': 'blockwise'"),
    ],
)
def test_each_jobs_megatron_configs_build_as_verls_engine_builds_them(
    paper, tmp_path, verl_site, run_id, want
):
    """megatron-core 0.19.2's TransformerConfig (through mbridge 0.15.1) and OptimizerConfig accept every
    field the job sets: the FP8 recipe, the fused attention backend, full recompute, bf16 Adam moments."""
    ok, detail = _engine(paper, tmp_path, run_id)
    assert ok, detail
    assert want in detail and "'attention_backend': 'AttnBackend.fused'" in detail, detail
    moments = "torch.float32" if "/bf16/" in run_id else "torch.bfloat16"
    assert f"'exp_avg_dtype': '{moments}'" in detail, detail


@pytest.mark.parametrize("model", ["qwen3-8b", "qwen3-14b", "qwen2.5-32b"])
def test_each_models_tensor_and_pipeline_sizes_reach_megatron_and_vllm(paper, tmp_path, verl_site, model):
    """The sizes fp8rl derives from the model (verl_model.parallelism) are the ones verl's engine builds
    megatron-core's TransformerConfig with (set in its parallel state, read by mbridge, checked against
    the model's heads, KV heads and layers), the reference policy's, and vLLM's."""
    from fp8rl.adapters.verl_model import parallelism

    par = parallelism(paper.model(model))
    ok, detail = _engine(paper, tmp_path, f"grpo/{model}/fp8_tis/blockwise/seed0")
    assert ok, detail
    assert f"'tensor_model_parallel_size': {par.tp}, 'pipeline_model_parallel_size': {par.pp}" in detail, (
        detail
    )
    assert f"'sequence_parallel': {par.tp > 1}" in detail and f"'rollout_tp': {par.rollout_tp}" in detail
    assert f"'ref_tp_pp': [{par.tp}, {par.pp}]" in detail, detail


@pytest.mark.parametrize(
    "extra, shape, error",
    [
        ((), (36, 6, 36), "num_attention_heads (36) must be a multiple of tensor_model_parallel_size (8)"),
        (("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=3",), None, "PP 3"),
        (("actor_rollout_ref.rollout.tensor_model_parallel_size=16",), None, "vLLM's TP 16"),
    ],
)
def test_a_parallel_layout_that_does_not_fit_fails_the_engine_step(
    paper, tmp_path, verl_site, extra, shape, error
):
    """The step has teeth: heads TP does not divide (a 36-head model at the 32B's TP 8), a PP that does
    not divide the GPUs, a vLLM TP wider than a node."""
    ok, detail = _engine(paper, tmp_path, "grpo/qwen2.5-32b/fp8/blockwise/seed0", extra, shape)
    assert not ok and error in detail, detail


def test_a_transformer_config_key_megatron_does_not_know_fails_the_engine_step(paper, tmp_path, verl_site):
    """The step has teeth: a misspelt override stops the engine's TransformerConfig, as it would stop
    every GPU worker of the job."""
    typo = "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8_recipie=blockwise"
    ok, detail = _engine(paper, tmp_path, "grpo/qwen3-8b/fp8/blockwise/seed0", (typo,))
    assert not ok and "fp8_recipie" in detail, detail
