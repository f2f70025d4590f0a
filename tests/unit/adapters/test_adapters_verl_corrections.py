"""Each mismatch correction equals verl 0.9.1's own rollout correction on the same tensors, with the
settings `fp8rl.adapters.verl_corrections` gives verl (run in the verl environment: conftest.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fp8rl.adapters.verl_corrections import correction_overrides
from fp8rl.config import TISConfig
from fp8rl.config_loader import load_config
from fp8rl.rl.corrections import mismatch_aliases, rollout_correction
from fp8rl.vocabulary import VARIANT_SPECS
from tests.unit.adapters.test_adapters_verl_compose import PATHS, _validate, compose  # noqa: F401 (fixture)

RC = "algorithm.rollout_correction"
ROOT = Path(__file__).resolve().parents[3]


def _batch(seed: int, b: int = 16, t: int = 7, noise: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).double()
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    rollout = old + torch.randn(b, t, generator=g, dtype=torch.float64) * noise
    return old, rollout, mask


def _verl(variant: str, cfg, old, rollout, mask):
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    ov = correction_overrides(cfg, VARIANT_SPECS[variant])
    weights, new_mask, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask,
        rollout_is=ov[f"{RC}.rollout_is"], rollout_is_threshold=ov[f"{RC}.rollout_is_threshold"],
        rollout_rs=ov.get(f"{RC}.rollout_rs"), rollout_rs_threshold=ov.get(f"{RC}.rollout_rs_threshold"),
    )  # fmt: skip
    return weights.batch["rollout_is_weights"], new_mask, metrics


CFG = SimpleNamespace(tis=TISConfig(cap=2.0, icepop=(0.5, 3.0), mis=(0.95, 1.05)))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("variant", ["fp8_tis", "fp8_seqtis", "fp8_icepop", "fp8_mis"])
def test_correction_equals_verls(verl_site, variant, seed):
    old, rollout, mask = _batch(seed, noise=0.6 if variant != "fp8_mis" else 0.15)
    spec = VARIANT_SPECS[variant]
    t = CFG.tis
    ours = rollout_correction(spec.correction, old, rollout, mask, cap=t.cap, icepop=t.icepop, mis=t.mis)
    w, new_mask, _ = _verl(variant, CFG, old, rollout, mask)
    kept = mask if ours.keep is None else mask * ours.keep[:, None].double()
    assert torch.equal(new_mask, kept)
    # verl keeps the IS weights of rejected sequences and drops them through the mask instead
    torch.testing.assert_close(ours.weights, w * new_mask, rtol=1e-12, atol=1e-12)
    if spec.correction == "mis":
        assert 0 < int(ours.keep.sum()) < len(ours.keep)  # both kept and dropped sequences exercised
    if spec.correction == "icepop":
        assert bool(((w == 0) & (mask > 0)).any()) and bool((w > t.cap).any())  # masked, untruncated
    if spec.correction == "tis":
        assert bool((w == t.cap).any())


@pytest.mark.parametrize("seed", [0, 1])
def test_mismatch_aliases_equal_verls_metrics(verl_site, seed):
    old, rollout, mask = _batch(seed)
    _, _, metrics = _verl("fp8_tis", CFG, old, rollout, mask)
    ours = mismatch_aliases(old, rollout, mask)
    assert ours["rollout_corr/kl"] == pytest.approx(metrics["rollout_corr/kl"], abs=1e-7)
    assert ours["mismatch_kl"] == pytest.approx(metrics["rollout_corr/k3_kl"], rel=1e-6)


def test_fp16_maps_to_verls_float16_dtypes(verl_site):
    from fp8rl.adapters.verl_corrections import precision_overrides

    ov = precision_overrides(VARIANT_SPECS["fp16"])
    assert set(ov.values()) == {"float16"}
    assert precision_overrides(VARIANT_SPECS["bf16"]) == {}


def test_new_variants_compose_and_validate_in_verl(compose, capsys):  # noqa: F811 (the fixture)
    """The paper config with every new variant: verl's Hydra config takes the correction and fp16 keys
    and its validation passes them."""
    from fp8rl.adapters.verl_overrides import verl_overrides

    new = ["fp8_seqtis", "fp8_mis", "fp8_icepop_calib", "fp16"]
    cfg = load_config(
        ROOT / "config/paper.yaml",
        ["calib.reference=static:0.01", f"matrix.variants=[bf16,{','.join(new)}]", "matrix.seeds=[0]",
         "matrix.models=[qwen3-8b]", "matrix.algorithms=[grpo]", "matrix.granularities=[blockwise]"],
    )  # fmt: skip
    seen = set()
    for spec in cfg.runs():
        c = compose(verl_overrides(cfg, spec, PATHS))
        _validate(c)
        rc = c.algorithm.rollout_correction
        seen.add(spec.variant)
        if spec.variant == "fp8_seqtis":
            assert rc.rollout_is == "sequence" and rc.rollout_is_threshold == cfg.tis.cap
        if spec.variant == "fp8_mis":
            assert rc.rollout_is == "token" and rc.rollout_rs == "seq_mean_k1"
        if spec.variant == "fp8_icepop_calib":
            assert rc.rollout_is_threshold == "0.5_5.0"
        if spec.variant == "fp16":
            assert c.actor_rollout_ref.actor.megatron.dtype == "float16"
            assert c.actor_rollout_ref.rollout.dtype == "float16"
    assert seen == {"bf16", *new}
    capsys.readouterr()
