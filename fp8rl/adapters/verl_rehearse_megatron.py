"""verl 0.9.1's Megatron checkpoint manager on CPU: the actor of the checkpoint chain (fp8rl.adapters.
verl_rehearse_ckpt) whose saves and loads are verl's own, in the layout the paper's jobs write.

The paper tier trains with verl's Megatron engine, whose actor saves through
`verl.utils.checkpoint.megatron_checkpoint_manager.MegatronCheckpointManager` (built as verl's
`workers/engine/megatron/transformer_impl.py` builds it). `MegatronActor` builds that class with the
job's own settings (its composed `actor_rollout_ref.actor.checkpoint` and `.megatron` sections, the
model's tokenizer and config) over a one-rank gloo group with megatron-core's parallel state, and its
`save_checkpoint` / `load_checkpoint` are the manager's. So each save is what verl writes on the cluster
(layout schema 2): `ckpt_contents.json` (written last), `model/huggingface/` through the bridge (config,
tokenizer, weights), `optimizer/dist_ckpt/` and `extra/dist_ckpt/` through megatron-core's
`dist_checkpointing` (torch_dist format), `transformer_config.json` (the job's own TransformerConfig,
built through mbridge as verl's engine builds it: fp8rl.adapters.verl_rehearse_engine); verl's own retention
(`max_ckpt_to_keep`, which knows only the job's own saves) and its load path (`_raise_for_old_layout`,
content metadata, the bridge's load, optimizer, scheduler and RNG states) run as they do there.

Stand-ins for what needs a GPU or a real model: the model is one tensor holding the stand-in actor's
state (`STATE_BYTES` values), sharded as a Megatron module shards its weights; the bridge (mbridge's
`save_weights` / `load_weights`) writes and reads it as `model.safetensors`; the optimizer's Adam moment
holds the same state (a resumed job whose optimizer and model states differ fails), the LR scheduler
counts saves; the CUDA RNG tracker holds a CPU generator state; megatron-core's two CUDA calls in
`dist_checkpointing` (`torch.cuda.synchronize`, `torch.cuda.current_device`) are no-ops on CPU, and the
one module megatron-core imports Triton for (its MoE paged stash) is a stub. megatron-core's sources are
the pinned wheel's (scripts/upstream_src.sh: `build/upstream`), put on the path without Transformer
Engine's (whose import needs its CUDA library): `megatron_site`.

`check_saves` then reads what the chain left as the job script does: every save's manifest names the
Hugging Face tree for the model and the optimizer's dist_ckpt, and the export of the last save
(fp8rl.adapters.verl_checkpoint, with the base model's tokenizer) holds the last step's weights.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import types
from pathlib import Path

from fp8rl.adapters.verl_checkpoint import HF_SUBDIR, MANIFEST, export

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("FP8RL_UPSTREAM_SRC", ROOT / "build" / "upstream"))
STATE_BYTES = 8  # the stand-in actor's state: 16 hex digits
WEIGHTS_FILE = "model.safetensors"
WEIGHT_KEY = "model.weight"
TRITON_MODULES = ("megatron.core.transformer.moe.ops.paged_stash",)


def has_megatron_sources(upstream: Path = UPSTREAM) -> bool:
    """Whether `upstream` holds megatron-core's sources (scripts/upstream_src.sh)."""
    return (Path(upstream) / "megatron" / "core").is_dir()


SITE_PACKAGES = ("megatron", "mbridge", "einops")  # of `upstream` (scripts/upstream_src.sh)


def megatron_site(work: Path, upstream: Path = UPSTREAM) -> Path | None:
    """A folder to put on PYTHONPATH holding the pinned sources of megatron-core, mbridge and einops only
    (Transformer Engine's, beside them in `upstream`, fail to import without its CUDA library); None
    without megatron-core's."""
    if not has_megatron_sources(upstream):
        return None
    site = Path(work) / "megatron_site"
    site.mkdir(parents=True, exist_ok=True)
    entries = [Path(upstream) / name for name in SITE_PACKAGES if (Path(upstream) / name).is_dir()]
    infos = [
        p for name in ("megatron_core", *SITE_PACKAGES) for p in Path(upstream).glob(f"{name}-*.dist-info")
    ]
    for entry in [*entries, *infos]:
        link = site / entry.name
        if not link.exists():
            link.symlink_to(entry.resolve())
    return site


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def cpu_megatron() -> None:
    """megatron-core importable and its dist_checkpointing runnable on CPU (module docstring), its
    parallel state initialised over a one-rank gloo group."""
    import torch

    for name in TRITON_MODULES:
        sys.modules.setdefault(name, _Stub(name))
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.current_device = lambda: "cpu"
    import torch.distributed as dist

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    from megatron.core import mpu

    if not mpu.model_parallel_is_initialized():
        mpu.initialize_model_parallel(1, 1)


def _model_class():
    import torch
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    class StandInModule(torch.nn.Module):
        """One weight, sharded as a Megatron module's (`sharded_state_dict`)."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(STATE_BYTES), requires_grad=False)

        def sharded_state_dict(self, prefix: str = "", sharded_offsets=(), metadata=None) -> dict:
            key = f"{prefix}weight"
            return {key: ShardedTensor.from_rank_offsets(key, self.weight.data, replica_id=0)}

    return StandInModule


class StandInOptimizer:
    """The methods of a Megatron optimizer verl's manager calls: `sharded_state_dict` (one Adam moment)
    and `load_state_dict`."""

    def __init__(self) -> None:
        import torch

        self.exp_avg = torch.zeros(STATE_BYTES)

    def sharded_state_dict(self, model_sharded_state_dict, is_loading: bool = False, metadata=None) -> dict:
        from megatron.core.dist_checkpointing.mapping import ShardedTensor

        return {"exp_avg": ShardedTensor.from_rank_offsets("optimizer.exp_avg", self.exp_avg, replica_id=0)}

    def load_state_dict(self, state: dict) -> None:
        self.exp_avg.copy_(state["exp_avg"])


class StandInScheduler:
    """An LR scheduler's `state_dict` / `load_state_dict` (saved with the optimizer)."""

    def __init__(self) -> None:
        self.num_steps = 0

    def state_dict(self) -> dict:
        return {"num_steps": self.num_steps}

    def load_state_dict(self, state: dict) -> None:
        self.num_steps = int(state["num_steps"])


class StandInBridge:
    """mbridge's `save_weights` / `load_weights` (verl's vanilla bridge) for the stand-in module."""

    def save_weights(self, models, weights_path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(weights_path, exist_ok=True)
        save_file({WEIGHT_KEY: models[0].weight.data.contiguous()}, os.path.join(weights_path, WEIGHTS_FILE))

    def load_weights(self, models, weights_path: str) -> None:
        from safetensors.torch import load_file

        models[0].weight.data.copy_(load_file(os.path.join(weights_path, WEIGHTS_FILE))[WEIGHT_KEY])


def _state_of(tensor) -> str:
    return bytes(int(v) for v in tensor.tolist()).hex()


def _tensor_of(state: str):
    import torch

    return torch.tensor(list(bytes.fromhex(state)), dtype=torch.float32)


def build_manager(config, model_path: str):
    """verl's `MegatronCheckpointManager` as its Megatron engine builds it, from the job's composed
    `config` (its actor's checkpoint and megatron sections) and the model folder `model_path`."""
    cpu_megatron()
    import torch
    from megatron.core import tensor_parallel
    from megatron.core.transformer import TransformerConfig
    from omegaconf import OmegaConf
    from transformers import AutoConfig, AutoTokenizer
    from verl.utils.checkpoint.megatron_checkpoint_manager import MegatronCheckpointManager

    actor = config.actor_rollout_ref.actor
    meg = actor.megatron
    hf_config = AutoConfig.from_pretrained(model_path)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.states_ = {"model-parallel-rng": torch.get_rng_state()}  # a CUDA generator's on a GPU
    tmp_config = OmegaConf.create(
        {
            "model": {"path": model_path},
            "megatron": {
                "dist_ckpt_optim_fully_reshardable": meg.dist_ckpt_optim_fully_reshardable,
                "distrib_optim_fully_reshardable_mem_efficient": meg.distrib_optim_fully_reshardable_mem_efficient,
            },
        }
    )
    if (UPSTREAM / "mbridge").is_dir():  # the job's own, as verl's engine builds it
        from fp8rl.adapters.verl_job_config import transformer_config as job_transformer_config

        transformer_config = job_transformer_config(actor, hf_config)
    else:
        transformer_config = TransformerConfig(
            num_layers=hf_config.num_hidden_layers,
            hidden_size=hf_config.hidden_size,
            num_attention_heads=hf_config.num_attention_heads,
        )
    return MegatronCheckpointManager(
        config=tmp_config,
        checkpoint_config=actor.checkpoint,
        model_config=hf_config,
        transformer_config=transformer_config,
        role="actor",
        model=torch.nn.ModuleList([_model_class()()]),
        arch=hf_config.architectures[0],
        hf_config=hf_config,
        param_dtype=torch.bfloat16,
        share_embeddings_and_output_weights=bool(getattr(hf_config, "tie_word_embeddings", False)),
        processing_class=AutoTokenizer.from_pretrained(model_path),
        optimizer=StandInOptimizer(),
        optimizer_scheduler=StandInScheduler(),
        use_distributed_optimizer=meg.use_distributed_optimizer,
        use_checkpoint_opt_param_scheduler=actor.optim.use_checkpoint_opt_param_scheduler,
        use_dist_checkpointing=meg.use_dist_checkpointing,
        bridge=StandInBridge(),
        provider=None,
        peft_cls=None,
        use_megatron_fsdp=bool(meg.get("use_megatron_fsdp", False)),
    )


def megatron_actor_class(base: type) -> type:
    """`base` (verl_rehearse_ckpt.StandInActor) with verl's Megatron checkpoint manager saving and
    loading its state: call `attach(config, model_path)` before the first save or load."""

    class MegatronActor(base):
        def attach(self, config, model_path: str) -> None:
            self.manager = build_manager(config, model_path)

        def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
            m = self.manager
            m.model[0].weight.data.copy_(_tensor_of(self.state))
            m.optimizer.exp_avg.copy_(_tensor_of(self.state))
            m.lr_scheduler.num_steps += 1
            m.save_checkpoint(
                local_path, hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
            self.saved.append(int(global_step))

        def load_checkpoint(self, local_path, del_local_after_load=False):
            m = self.manager
            m.load_checkpoint(local_path, del_local_after_load=del_local_after_load)
            model, optim = _state_of(m.model[0].weight.data), _state_of(m.optimizer.exp_avg)
            if model != optim:
                raise RuntimeError(f"{local_path}: model state {model}, optimizer state {optim}")
            self.state = model

    return MegatronActor


def check_saves(ckpt: Path, base: Path, work: Path, last_state: str) -> list[str]:
    """What the job script reads of the saves the chain left under `ckpt` (module docstring): problems,
    none when every save's manifest is the Megatron layout's and the export of the last save holds
    `last_state` with the base model's tokenizer."""
    problems = []
    saves = sorted(ckpt.glob("global_step_*"), key=lambda p: int(p.name.removeprefix("global_step_")))
    for save in saves:
        manifest = save / "actor" / MANIFEST
        if not manifest.is_file():
            problems.append(f"{manifest}: missing")
            continue
        m = json.loads(manifest.read_text())
        contents = m.get("contents", {})
        if m.get("framework") != "megatron" or contents.get("model", {}).get("path") != str(HF_SUBDIR):
            problems.append(f"{manifest}: not a Megatron save with the model at {HF_SUBDIR} ({contents})")
        optim = save / "actor" / contents.get("optimizer", {}).get("path", "optimizer/dist_ckpt")
        if not (optim / "metadata.json").is_file():
            problems.append(f"{optim}: no megatron-core dist_checkpointing metadata.json")
    if not saves:
        return ["no saves left"]
    from safetensors.torch import load_file

    latest = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    target = work / "checkpoint"
    export(ckpt / f"global_step_{latest}" / "actor", target, tokenizer=base)
    weights = _state_of(load_file(target / WEIGHTS_FILE)[WEIGHT_KEY])
    if weights != last_state:
        problems.append(f"the export of step {latest} holds state {weights}, the last step's is {last_state}")
    if (target / "tokenizer_config.json").read_bytes() != (base / "tokenizer_config.json").read_bytes():
        problems.append("the export's tokenizer_config.json is not the base model's")
    return problems
