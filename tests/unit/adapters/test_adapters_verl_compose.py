"""Every paper cell's overrides compose against verl's own trainer config and pass verl's validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fp8rl.adapters.verl_overrides import CONFIG_NAME, VerlPaths, verl_overrides
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PATHS = VerlPaths("/models/base", "/run/verl_data/train.parquet", "/run/verl_data/test.parquet", "/run")


@pytest.fixture(scope="module")
def compose(verl_site):
    """compose(overrides) -> verl's `ppo_megatron_trainer` DictConfig with the overrides applied."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        yield lambda overrides: hydra_compose(config_name=CONFIG_NAME, overrides=overrides)


def _validate(c) -> None:
    """What verl's main_ppo checks before it starts Ray, plus the typed configs its workers build."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(c, use_reference_policy=need_reference_policy(c), use_critic=need_critic(c))
    for key in ("algorithm", "actor_rollout_ref.actor", "actor_rollout_ref.rollout"):
        omega_conf_to_dataclass(OmegaConf.select(c, key))


def _key_set(overrides: list[str]) -> tuple[str, ...]:
    return tuple(o.split("=", 1)[0] for o in overrides)


def _apply(base, overrides: list[str]):
    """`overrides` applied in place to `base`, a config Hydra composed from overrides with the same keys,
    by Hydra's own override parser: every key is set again, so nothing of the previous cell remains."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    for o in OverridesParser.create().parse_overrides(overrides):
        OmegaConf.update(base, o.key_or_group, o.value(), merge=False, force_add=o.is_add())
    return base


def _check_cell(c, cfg, spec) -> None:
    actor, rollout = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    algo = cfg.algorithm(spec.algo)
    model = cfg.model(spec.model)
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node) == (model.nodes, model.gpus_per_node)
    assert actor.clip_ratio_low == algo.clip_low and actor.clip_ratio_high == algo.clip_high
    assert rollout.n == algo.group_size and c.data.train_batch_size == cfg.schedule.prompts_per_step
    assert actor.megatron.seed == spec.seed and c.data.seed == spec.seed
    assert actor.policy_loss.loss_mode == ("calibrated_clip" if spec.spec.calib else "fp8rl_clip")
    te = actor.megatron.override_transformer_config
    if spec.spec.fp8:
        assert rollout.quantization == "fp8"
        assert te.fp8_recipe == spec.granularity
        assert te.fp8 == ("e4m3" if spec.granularity == "blockwise" else "hybrid")
    else:
        assert rollout.quantization is None and "fp8" not in te
    rc = c.algorithm.rollout_correction
    assert rc.rollout_is == ("token" if spec.spec.tis else None)
    assert rc.rollout_is_threshold == cfg.tis.cap
    if spec.algo == "dapo":
        assert c.algorithm.filter_groups.enable and c.reward.reward_manager.name == "dapo"
        assert actor.clip_ratio_c == algo.clip_c
        assert c.reward.reward_kwargs.overlong_buffer_cfg.len == algo.overlong_buffer_len
    env = c.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "fp8rl.adapters.verl_loss"


def test_every_paper_cell_composes_and_validates(compose, capsys):
    """All 162 cells. Hydra composes the first cell of each distinct override key set and one more (the
    fast path must equal it); the other cells are applied with Hydra's override parser onto that base.
    One cell per (algo, model, variant) goes through verl's validation and typed configs (granularity
    and seed change values only: recipe names and seeds, checked on every cell)."""
    from omegaconf import OmegaConf

    cfg = load_config(ROOT / "config/paper.yaml", ["calib.reference=run"])
    runs = cfg.runs()
    assert len(runs) == 162
    bases: dict[tuple[str, ...], object] = {}
    cross_checked: set[tuple[str, ...]] = set()
    validated: set[tuple[str, str, str]] = set()
    for spec in runs:
        ov = verl_overrides(cfg, spec, PATHS)
        keys = _key_set(ov)
        if keys not in bases:
            bases[keys] = c = compose(ov)
        else:
            c = _apply(bases[keys], ov)
            if keys not in cross_checked:
                assert OmegaConf.to_container(c) == OmegaConf.to_container(compose(ov))
                cross_checked.add(keys)
                c = bases[keys] = compose(ov)  # continue from a fresh composition
        if (spec.algo, spec.model, spec.variant) not in validated:
            _validate(c)
            validated.add((spec.algo, spec.model, spec.variant))
        _check_cell(c, cfg, spec)
    assert cross_checked == set(bases) and len(validated) == 30
    capsys.readouterr()


def test_delayed_and_mxfp8_recipes_compose(compose, capsys):
    cfg = load_config(
        ROOT / "config/paper.yaml",
        ["calib.reference=static:0.01", "matrix.granularities=[delayed,mxfp8]", "matrix.seeds=[0]",
         "matrix.models=[qwen3-8b]", "fp8.kv_cache=true"],
    )  # fmt: skip
    specs = [s for s in cfg.runs() if s.variant == "fp8_tis_calib"]
    for spec in specs:
        c = compose(verl_overrides(cfg, spec, PATHS))
        _validate(c)
        te = c.actor_rollout_ref.actor.megatron.override_transformer_config
        assert te.fp8_recipe == spec.granularity
        if spec.granularity == "delayed":
            assert te.fp8_amax_history_len == cfg.fp8.amax_history_len and te.fp8 == "hybrid"
        else:
            assert te.fp8 == "e4m3"
        assert c.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype == "fp8"
    capsys.readouterr()


def test_a_wrong_key_does_not_compose(compose):
    """The check has teeth: verl's config rejects a key it does not define."""
    from hydra.errors import ConfigCompositionException

    cfg = load_config(ROOT / "config/paper.yaml", ["calib.reference=run"])
    bad = [*verl_overrides(cfg, cfg.runs()[0], PATHS), "actor_rollout_ref.actor.clip_ratio_lowest=0.1"]
    with pytest.raises(ConfigCompositionException):
        compose(bad)


def test_the_one_node_smoke_is_the_paper_path_at_small_size(compose, capsys):
    """config/verl_smoke.yaml (scripts/gpu_checks.sh runs it on a GPU node) composes and validates in
    verl, and differs from the paper tier only in size: model, matrix, schedule, data, resources."""
    from fp8rl.validation import CONFIG_CHECKS

    smoke = load_config(ROOT / "config/verl_smoke.yaml", checks=CONFIG_CHECKS)
    paper = load_config(ROOT / "config/paper.yaml")
    for section in ("backend", "fp8", "tis", "calib"):
        assert getattr(smoke, section) == getattr(paper, section), section
    assert smoke.eval.answer_format == paper.eval.answer_format
    assert {"bf16", "fp8_tis", "fp8_tis_calib"} <= set(smoke.matrix.variants) <= set(paper.matrix.variants)
    for spec in smoke.runs():
        c = compose(verl_overrides(smoke, spec, PATHS))
        _validate(c)
        _check_cell(c, smoke, spec)
    capsys.readouterr()
