"""A training job's Megatron engine configuration built on CPU as verl 0.9.1's Megatron engine builds it
on each GPU worker, before its first step: the `megatron_config` step of a rehearsal
(fp8rl.adapters.verl_rehearse).

verl's `MegatronEngine` (`workers/engine/megatron/transformer_impl.py`) turns the actor's
`megatron.override_transformer_config` into megatron-core's `TransformerConfig` through the bridge
(`_build_tf_config`, the vanilla-mbridge path the paper's jobs take: `mapping_string_to_attn_backend`,
mbridge's `AutoBridge.from_config(hf_config)`, `set_extra_args`, `.config`) and the actor's `optim`
section into megatron-core's `OptimizerConfig` (`_build_optimizer`: `init_megatron_optim_config`).
Both constructors check their fields (`__post_init__`): a key megatron-core does not know, or a
combination it refuses, stops every worker of the job after Slurm and Ray gave it its GPUs, and the
chain's next job the same way. `engine_configs` runs that code with the job's composed config and its
model's config, in megatron-core 0.19.2 and mbridge 0.15.1's pinned sources (build/upstream) on CPU
(fp8rl.adapters.verl_rehearse_megatron `cpu_megatron`).

The job's tensor, pipeline and virtual pipeline sizes are set in megatron-core's parallel state on the
one rank (`apply_parallel_sizes`), so the `TransformerConfig` has them and its checks of the model's
heads, KV heads and layers run; the sizes verl reads for the reference policy and for vLLM are checked
against the GPUs and the model (`parallel_layout`). Stand-ins: one rank; Transformer
Engine cannot be imported without its CUDA library, so the one thing `OptimizerConfig` asks of it for
the precision-aware optimizer (that its `FusedAdam` takes `master_weight_dtype`, `exp_avg_dtype`,
`exp_avg_sq_dtype` and `use_decoupled_grad`) is answered by a class with the parameters of the pinned
source's `FusedAdam.__init__`, and its version by the pinned wheel's (`_te_fused_adam`).

    python -m fp8rl.adapters.verl_rehearse_engine OVERRIDES_JSON MODEL_DIR   # prints the configs (JSON)
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

from fp8rl.adapters.verl_job_config import compose, transformer_config
from fp8rl.adapters.verl_rehearse_megatron import UPSTREAM, megatron_site

TE_FUSED_ADAM = Path("transformer_engine") / "pytorch" / "optimizers" / "fused_adam.py"
TIMEOUT_S = 600


def _te_fused_adam(upstream: Path = UPSTREAM) -> None:
    """`transformer_engine.pytorch.optimizers.FusedAdam` as a class whose signature is the pinned
    source's `FusedAdam.__init__` (module docstring), registered in `sys.modules`."""
    tree = ast.parse((Path(upstream) / TE_FUSED_ADAM).read_text())
    init = next(
        f
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and c.name == "FusedAdam"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    names = [a.arg for a in [*init.args.args, *init.args.kwonlyargs] if a.arg != "self"]
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for n in names]
    fused_adam = type("FusedAdam", (), {"__signature__": inspect.Signature(params)})
    pkg = "transformer_engine.pytorch.optimizers"
    for name in ("transformer_engine", "transformer_engine.pytorch", pkg):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules[pkg].FusedAdam = fused_adam
    info = next(Path(upstream).glob("transformer_engine-*.dist-info"))  # megatron-core reads the version
    sys.modules["transformer_engine"].__version__ = info.name.removeprefix("transformer_engine-").split(
        ".dist"
    )[0]


def apply_parallel_sizes(megatron) -> None:
    """megatron-core's parallel state with the composed `megatron` section's tensor, pipeline and virtual
    pipeline sizes, as verl's engine initialises it on each GPU worker (`initialize_model_parallel`
    with the engine config's sizes), on this one rank: mbridge reads them from there into the
    `TransformerConfig` (`tensor_model_parallel_size`, `pipeline_model_parallel_size`,
    `sequence_parallel`), whose checks (heads and KV heads by TP, layers by PP) then run on them."""
    from megatron.core import parallel_state as mpu

    mpu.set_tensor_model_parallel_world_size(int(megatron.tensor_model_parallel_size))
    mpu.set_pipeline_model_parallel_world_size(int(megatron.pipeline_model_parallel_size))
    if megatron.virtual_pipeline_model_parallel_size is not None:
        mpu.set_virtual_pipeline_model_parallel_world_size(int(megatron.virtual_pipeline_model_parallel_size))


def parallel_layout(composed, hf_config) -> dict:
    """The job's parallel sizes as verl reads them from the composed config, the actor's, the reference
    policy's (verl's `ref.megatron` follows the actor's) and vLLM's, checked against the GPUs and the
    model: ValueError naming each size that does not fit (vLLM's TP must divide the attention heads and
    divide or be divided by the KV heads, and stay within a node; the actor's TP x PP x CP must divide
    the job's GPUs)."""
    arr = composed.actor_rollout_ref
    mega, ref, rollout_tp = arr.actor.megatron, arr.ref.megatron, int(arr.rollout.tensor_model_parallel_size)
    nodes, per_node = int(composed.trainer.nnodes), int(composed.trainer.n_gpus_per_node)
    heads, kv_heads = hf_config.num_attention_heads, hf_config.num_key_value_heads
    tp, pp, cp = (int(mega.tensor_model_parallel_size), int(mega.pipeline_model_parallel_size),
                  int(mega.context_parallel_size))  # fmt: skip
    problems = []
    if (nodes * per_node) % (tp * pp * cp):
        problems.append(
            f"actor TP {tp} x PP {pp} x CP {cp} does not divide the job's {nodes * per_node} GPUs"
        )
    if (int(ref.tensor_model_parallel_size), int(ref.pipeline_model_parallel_size)) != (tp, pp):
        problems.append(f"ref TP/PP {ref.tensor_model_parallel_size}/{ref.pipeline_model_parallel_size} "
                        f"differ from the actor's {tp}/{pp}")  # fmt: skip
    if heads % rollout_tp or (kv_heads % rollout_tp and rollout_tp % kv_heads):
        problems.append(
            f"vLLM's TP {rollout_tp} does not fit {heads} attention heads and {kv_heads} KV heads"
        )
    if rollout_tp > per_node or (nodes * per_node) % rollout_tp:
        problems.append(f"vLLM's TP {rollout_tp} does not fit {nodes} nodes of {per_node} GPUs")
    if problems:
        raise ValueError("; ".join(problems))
    return {"dp_size": nodes * per_node // (tp * pp * cp), "ref_tp_pp": [tp, pp], "rollout_tp": rollout_tp}


def engine_configs(overrides: list[str], model_path: str) -> dict:
    """The `TransformerConfig` and `OptimizerConfig` verl's Megatron engine builds for a job with
    `overrides` on the model at `model_path`, as the fields that say what the job trains with."""
    from fp8rl.adapters.verl_rehearse_megatron import cpu_megatron

    cpu_megatron()
    import torch
    from transformers import AutoConfig
    from verl.utils.megatron.optimizer import init_megatron_optim_config
    from verl.utils.torch_dtypes import PrecisionType

    composed = compose(overrides)
    actor = composed.actor_rollout_ref.actor
    param_dtype = PrecisionType.to_dtype(actor.megatron.dtype)
    apply_parallel_sizes(actor.megatron)
    hf_config = AutoConfig.from_pretrained(model_path)
    tf = transformer_config(actor, hf_config)
    _te_fused_adam()
    optim = init_megatron_optim_config(
        actor.optim,
        use_distributed_optimizer=actor.megatron.use_distributed_optimizer,
        fp16=param_dtype == torch.float16,
        bf16=param_dtype == torch.bfloat16,
    )
    return {
        "tensor_model_parallel_size": tf.tensor_model_parallel_size,
        "pipeline_model_parallel_size": tf.pipeline_model_parallel_size,
        "sequence_parallel": tf.sequence_parallel,
        **parallel_layout(composed, hf_config),
        "fp8": tf.fp8,
        "fp8_recipe": tf.fp8_recipe if tf.fp8 else None,
        "attention_backend": str(tf.attention_backend),
        "recompute_granularity": tf.recompute_granularity,
        "params_dtype": str(tf.params_dtype),
        "precision_aware_optimizer": bool(optim.use_precision_aware_optimizer),
        "exp_avg_dtype": str(optim.exp_avg_dtype),
        "exp_avg_sq_dtype": str(optim.exp_avg_sq_dtype),
    }


def engine_step(out: Path, base: Path, timeout_s: int = TIMEOUT_S) -> tuple[bool, str]:
    """`(ok, what it found)` of the rehearsal's `megatron_config` step for the run files under `out`:
    `engine_configs` with the job's overrides (its model path: `base`) in a child process."""
    from fp8rl.adapters.verl_launch import OVERRIDES_FILE

    site = megatron_site(out / "rehearsal_engine")
    if site is None:
        return True, "skipped: no megatron-core sources (scripts/upstream_src.sh makes build/upstream)"
    overrides = json.loads((out / OVERRIDES_FILE).read_text())["overrides"]
    spec = out / "rehearsal_engine" / "overrides.json"
    spec.write_text(json.dumps(overrides))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(site)]))
    res = subprocess.run(
        [sys.executable, "-m", "fp8rl.adapters.verl_rehearse_engine", str(spec), str(base)],
        env=env, capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if res.returncode != 0:
        return False, f"verl's Megatron engine config failed:\n{(res.stdout + res.stderr)[-3000:]}"
    configs = json.loads(res.stdout.strip().splitlines()[-1])
    want = {"tensor_model_parallel_size": "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
            "pipeline_model_parallel_size": "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
            "rollout_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size"}  # fmt: skip
    given = dict(o.split("=", 1) for o in overrides)
    lost = [f"{key}: {configs[k]} (the overrides: {given.get(key)})" for k, key in want.items()
            if str(configs[k]) != given.get(key, "1")]  # fmt: skip
    if lost:
        return False, f"the job's parallel sizes did not reach verl's engine: {'; '.join(lost)}"
    return True, (
        "megatron-core's TransformerConfig through mbridge and its OptimizerConfig built as verl's engine "
        f"builds them: {configs}"
    )


def main(spec: str, model_path: str) -> None:
    print(json.dumps(engine_configs(json.loads(Path(spec).read_text()), model_path)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
