"""Adaptive IcePop on the verl path: verl's own rollout correction, set as fp8rl sets it, hands the loss
the untruncated ratios, and `fp8rl_icepop_adaptive` called through verl's registry weights the tokens as
the reference trainer's correction does on the same ratios (run in the verl environment: conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fp8rl.adapters.verl_corrections import correction_loss_spec, correction_overrides, policy_loss_mode
from fp8rl.config import TISConfig
from fp8rl.rl import ClipBounds, LossTerms, policy_loss
from fp8rl.rl.corrections import rollout_correction
from fp8rl.vocabulary import VARIANT_SPECS
from tests.unit.adapters.test_adapters_verl_compose import PATHS, _validate, compose  # noqa: F401 (fixture)

RC = "algorithm.rollout_correction"
ROOT = Path(__file__).resolve().parents[3]
SPEC = VARIANT_SPECS["fp8_icepop_adaptive"]
CFG = SimpleNamespace(tis=TISConfig(icepop=(0.5, 2.0), icepop_mask_frac=0.1))


def _batch(seed: int, b: int = 16, t: int = 9, noise: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    old = -torch.rand(b, t, generator=g) * 3
    rollout = old + torch.randn(b, t, generator=g) * noise
    rollout[0, 0] = old[0, 0] - 30.0  # a ratio past verl's and fp8rl's log-ratio clamp
    new = (old + 0.1 * torch.randn(b, t, generator=g)).requires_grad_(True)
    adv = torch.randn(b, generator=g)[:, None].expand(b, t).contiguous()
    return old, rollout, new, adv, mask


def _verl_weights(old, rollout, mask):
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    ov = correction_overrides(CFG, SPEC)
    w, new_mask, _ = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is=ov[f"{RC}.rollout_is"], rollout_is_threshold=ov[f"{RC}.rollout_is_threshold"],
        rollout_rs=ov.get(f"{RC}.rollout_rs"), rollout_rs_threshold=ov.get(f"{RC}.rollout_rs_threshold"),
    )  # fmt: skip
    assert torch.equal(new_mask, mask)
    return w.batch["rollout_is_weights"]


@pytest.fixture
def registry(verl_site, monkeypatch, tmp_path):
    from verl.trainer.ppo import core_algos

    import fp8rl.adapters.verl_loss as vl

    spec = tmp_path / "verl_loss.json"
    spec.write_text(json.dumps({"clip_c": 3.0, "calib": None, **correction_loss_spec(CFG, SPEC)}))
    monkeypatch.setenv(vl.SPEC_ENV, str(spec))
    vl.reset()
    yield core_algos
    vl.reset()


def _actor_config():
    from omegaconf import OmegaConf

    return OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                             "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean", "global_batch_info": {},
                             "policy_loss": {"loss_mode": policy_loss_mode(SPEC)}})  # fmt: skip


def test_verl_hands_the_loss_the_untruncated_ratios(verl_site):
    old, rollout, _, _, mask = _batch(0)
    w = _verl_weights(old, rollout, mask)
    r = torch.exp((old - rollout).clamp(-20, 20)) * mask
    assert torch.equal(w, r)
    assert float(w.max()) > 1e8  # the clamped ratio exp(20) came through untruncated


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weights_and_loss_equal_the_reference_trainers(registry, seed):
    old, rollout, new, adv, mask = _batch(seed)
    t = CFG.tis
    ours = rollout_correction("icepop_adaptive", old, rollout, mask.bool(), icepop=t.icepop,
                              icepop_mask_frac=t.icepop_mask_frac)  # fmt: skip
    from fp8rl.adapters import verl_icepop

    w = _verl_weights(old, rollout, mask)
    assert torch.equal(verl_icepop.weights(w, mask), ours.weights)
    assert ours.metrics["icepop/low"] < 0.5 or ours.metrics["icepop/high"] > 2.0  # the band adapted
    assert 0 < ours.metrics["tis/masked"] <= 0.1

    fn = registry.get_policy_loss_fn("fp8rl_icepop_adaptive")
    loss, _ = fn(old, new, adv, mask.bool(), "token-mean", _actor_config(), w)
    expect, _ = policy_loss(new, old, adv, mask.bool(), ClipBounds.fixed(0.2, 0.28), LossTerms(clip_c=3.0),
                            is_weights=ours.weights)  # fmt: skip
    torch.testing.assert_close(loss, expect, rtol=0, atol=0)


def test_the_band_is_set_per_micro_batch(registry):
    """verl calls the loss per micro-batch: each half's band comes from its own ratios."""
    from fp8rl.adapters import verl_icepop

    old, rollout, _, _, mask = _batch(3)
    w = _verl_weights(old, rollout, mask)
    t = CFG.tis
    for half in (slice(0, 8), slice(8, 16)):
        own = rollout_correction("icepop_adaptive", old[half], rollout[half], mask[half].bool(),
                                 icepop=t.icepop, icepop_mask_frac=t.icepop_mask_frac)  # fmt: skip
        assert torch.equal(verl_icepop.weights(w[half], mask[half]), own.weights)


def test_the_run_selects_the_loss_and_the_spec(verl_site):
    assert policy_loss_mode(SPEC) == "fp8rl_icepop_adaptive"
    assert policy_loss_mode(VARIANT_SPECS["fp8_icepop"]) == "fp8rl_clip"
    assert correction_loss_spec(CFG, SPEC) == {"icepop_adaptive": {"band": [0.5, 2.0], "mask_frac": 0.1}}
    assert correction_loss_spec(CFG, VARIANT_SPECS["fp8_tis"]) == {}


def test_without_its_spec_the_loss_says_so(registry, monkeypatch):
    import fp8rl.adapters.verl_loss as vl

    monkeypatch.delenv(vl.SPEC_ENV)
    vl.reset()
    old, rollout, new, adv, mask = _batch(0)
    with pytest.raises(RuntimeError, match="adaptive IcePop options"):
        registry.get_policy_loss_fn("fp8rl_icepop_adaptive")(
            old, new, adv, mask.bool(), "token-mean", _actor_config(), _verl_weights(old, rollout, mask)
        )


def composed_paper_cell(compose_fn, variant: str):
    """The paper tier's qwen3-8b GRPO blockwise cell of `variant`, composed by verl's Hydra config and
    validated; checks the loss `fp8rl_{variant minus fp8_}` and token-level rollout ratios with a
    threshold that truncates nothing (the adaptive corrections read the raw ratios). (cfg, spec, config)."""
    from fp8rl.adapters.verl_corrections import RAW_RATIO_THRESHOLD
    from fp8rl.adapters.verl_overrides import verl_overrides
    from fp8rl.config_loader import load_config

    cfg = load_config(
        ROOT / "config/paper.yaml",
        [f"matrix.variants=[bf16,{variant}]", "matrix.seeds=[0]", "matrix.models=[qwen3-8b]",
         "matrix.algorithms=[grpo]", "matrix.granularities=[blockwise]"],
    )  # fmt: skip
    (spec,) = [s for s in cfg.runs() if s.variant == variant]
    c = compose_fn(verl_overrides(cfg, spec, PATHS))
    _validate(c)
    assert c.actor_rollout_ref.actor.policy_loss.loss_mode == "fp8rl_" + variant.removeprefix("fp8_")
    rc = c.algorithm.rollout_correction
    assert rc.rollout_is == "token" and float(rc.rollout_is_threshold) == RAW_RATIO_THRESHOLD
    return cfg, spec, c


def test_the_cell_composes_and_validates_in_verl(compose, capsys):  # noqa: F811 (the fixture)
    from fp8rl.adapters.verl_overrides import loss_spec

    cfg, spec, _ = composed_paper_cell(compose, "fp8_icepop_adaptive")
    assert set(loss_spec(cfg, spec)["icepop_adaptive"]) == {"band", "mask_frac"}
    capsys.readouterr()
