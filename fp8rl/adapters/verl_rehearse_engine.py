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

Stand-ins: one rank, so the job's tensor/pipeline sizes are not applied to the configs; Transformer
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


def engine_configs(overrides: list[str], model_path: str) -> dict:
    """The `TransformerConfig` and `OptimizerConfig` verl's Megatron engine builds for a job with
    `overrides` on the model at `model_path`, as the fields that say what the job trains with."""
    from fp8rl.adapters.verl_rehearse_megatron import cpu_megatron

    cpu_megatron()
    import torch
    from transformers import AutoConfig
    from verl.utils.megatron.optimizer import init_megatron_optim_config
    from verl.utils.torch_dtypes import PrecisionType

    actor = compose(overrides).actor_rollout_ref.actor
    param_dtype = PrecisionType.to_dtype(actor.megatron.dtype)
    tf = transformer_config(actor, AutoConfig.from_pretrained(model_path))
    _te_fused_adam()
    optim = init_megatron_optim_config(
        actor.optim,
        use_distributed_optimizer=actor.megatron.use_distributed_optimizer,
        fp16=param_dtype == torch.float16,
        bf16=param_dtype == torch.bfloat16,
    )
    return {
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
    return True, (
        "megatron-core's TransformerConfig through mbridge and its OptimizerConfig built as verl's engine "
        f"builds them: {configs}"
    )


def main(spec: str, model_path: str) -> None:
    print(json.dumps(engine_configs(json.loads(Path(spec).read_text()), model_path)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
