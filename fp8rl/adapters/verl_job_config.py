"""The configuration a verl job composes, as verl builds it: the Hydra config of a job's overrides
(`compose`: verl's trainer config `CONFIG_NAME` with the overrides fp8rl passes, from the installed
verl's own config folder) and the megatron-core `TransformerConfig` its Megatron engine builds for the
composed `actor` section through mbridge (`transformer_config`, as `MegatronEngine._build_tf_config`).
Shared by the rehearsal's checkpoint chain (fp8rl.adapters.verl_rehearse_ckpt), its Megatron checkpoint
manager (verl_rehearse_megatron) and its engine-config step (verl_rehearse_engine); needs verl's test
environment (and megatron-core's pinned sources for the second)."""

from __future__ import annotations

import os


def compose(overrides: list[str]):
    """verl's trainer config composed with `overrides`, as `python -m verl.trainer.main_ppo` composes it."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from fp8rl.adapters.verl_overrides import CONFIG_NAME

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name=CONFIG_NAME, overrides=overrides)


def transformer_config(actor, hf_config):
    """megatron-core's `TransformerConfig` for the composed `actor` section on the model `hf_config`, as
    verl's `MegatronEngine._build_tf_config` builds it through mbridge (module docstring)."""
    from verl.models.mcore.mbridge import AutoBridge
    from verl.utils.megatron_utils import mapping_string_to_attn_backend
    from verl.utils.torch_dtypes import PrecisionType

    override = mapping_string_to_attn_backend({**actor.megatron.override_transformer_config})
    bridge = AutoBridge.from_config(hf_config, dtype=PrecisionType.to_dtype(actor.megatron.dtype))
    bridge.set_extra_args(**override)
    return bridge.config
