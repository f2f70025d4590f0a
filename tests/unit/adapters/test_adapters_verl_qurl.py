"""QuRL's adaptive clip range on the verl path: verl's own rollout correction, set as fp8rl sets it, hands
the loss the untruncated trainer/rollout ratios; `fp8rl_qurl` through verl's registry clips at the
reference trainer's `qurl_bounds` of those ratios (reference ratio 1) with no per-token weights; through
verl's actor update on two gloo ranks every micro-batch of an update clips at the bounds of the update's
tokens pooled over both ranks (run in the verl environment: conftest.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from fp8rl.adapters.verl_corrections import (
    RAW_RATIO_THRESHOLD,
    check_corrections,
    correction_loss_spec,
    correction_overrides,
    policy_loss_mode,
)
from fp8rl.adapters.verl_rehearse_dp import run_ranks
from fp8rl.config import TISConfig
from fp8rl.rl import ClipBounds, LossTerms, policy_loss
from fp8rl.rl.corrections.qurl import qurl_bounds
from fp8rl.vocabulary import VARIANT_SPECS
from tests.unit.adapters.test_adapters_verl_compose import PATHS, _validate, compose  # noqa: F401 (fixture)
from tests.unit.adapters.test_adapters_verl_icepop import _actor_config, _batch, composed_paper_cell

RC = "algorithm.rollout_correction"
SPEC = VARIANT_SPECS["fp8_qurl"]
CFG = SimpleNamespace(tis=TISConfig())
FIXED = ClipBounds.fixed(0.2, 0.28)  # _actor_config's clip ratios


def _verl_ratios(old, rollout, mask):
    """`rollout_is_weights` as verl's rollout correction computes them under the run's overrides."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    ov = correction_overrides(CFG, SPEC)
    w, new_mask, _ = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is=ov[f"{RC}.rollout_is"], rollout_is_threshold=ov[f"{RC}.rollout_is_threshold"],
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
    monkeypatch.setattr(vl.verl_update, "POSITION", vl.verl_update.UpdatePosition(step=1, update=1))
    vl.reset()
    yield core_algos
    vl.reset()


def _fold(metrics: dict) -> dict:
    from fp8rl.adapters.verl_update import fold

    return fold(metrics)


def test_the_run_selects_the_loss_and_verl_hands_it_the_untruncated_ratios(verl_site):
    assert check_corrections(CFG, SPEC) is None
    assert policy_loss_mode(SPEC) == "fp8rl_qurl"
    assert correction_loss_spec(CFG, SPEC) == {}
    ov = correction_overrides(CFG, SPEC)
    assert ov[f"{RC}.rollout_is"] == "token" and ov[f"{RC}.rollout_is_threshold"] == RAW_RATIO_THRESHOLD
    old, rollout, _, _, mask = _batch(0)
    assert torch.equal(_verl_ratios(old, rollout, mask), torch.exp((old - rollout).clamp(-20, 20)) * mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_and_loss_equal_the_reference_trainers_on_the_same_ratios(registry, seed):
    old, rollout, new, adv, mask = _batch(seed)
    w = _verl_ratios(old, rollout, mask)
    expect_bounds, expect_metrics = qurl_bounds(w, torch.ones_like(w), mask.bool(), FIXED)
    assert expect_bounds.low < 0.8 and expect_bounds.high > 1.28  # the mismatch widened the range

    fn = registry.get_policy_loss_fn("fp8rl_qurl")
    loss, metrics = fn(old, new, adv, mask.bool(), "token-mean", _actor_config(), w)
    expect, _ = policy_loss(new, old, adv, mask.bool(), expect_bounds, LossTerms(clip_c=3.0), is_weights=None)
    torch.testing.assert_close(loss, expect, rtol=0, atol=0)  # no per-token weights: the ratios only measure
    folded = _fold(metrics)
    for key, value in expect_metrics.items():
        assert folded[key] == pytest.approx(value, rel=1e-12)


def test_the_gap_is_the_mean_absolute_trainer_rollout_log_ratio(registry):
    """Hand-computed: log-ratios +0.1, -0.3 on two valid tokens, one padded token of ratio e^5."""
    old = torch.tensor([[-1.0, -2.0, -1.0]])
    rollout = torch.tensor([[-1.1, -1.7, -6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w = _verl_ratios(old, rollout, mask)
    fn = registry.get_policy_loss_fn("fp8rl_qurl")
    _, metrics = fn(old, old.clone().requires_grad_(True), torch.ones(1, 3), mask.bool(), "token-mean",
                    _actor_config(), w)  # fmt: skip
    m = _fold(metrics)
    assert m["qurl/gap"] == pytest.approx(0.2, rel=1e-6)
    assert m["qurl/low"] == pytest.approx(0.8 * torch.exp(torch.tensor(-0.2)).item(), rel=1e-6)
    assert m["qurl/high"] == pytest.approx(1.28 * torch.exp(torch.tensor(0.2)).item(), rel=1e-6)


def test_without_the_ratios_the_loss_says_what_it_needs(registry):
    old, _, new, adv, mask = _batch(0)
    with pytest.raises(ValueError, match="rollout_is_weights.*QuRL"):
        registry.get_policy_loss_fn("fp8rl_qurl")(
            old, new, adv, mask.bool(), "token-mean", _actor_config(), None
        )


WORLD, MINI, MICRO = 2, 4, 2


def test_one_pair_of_bounds_per_update_across_dp_ranks(verl_site, tmp_path):
    """verl's train_mini_batch on two gloo ranks (mini-batches of 4 sequences a rank, micro-batches of
    2): every micro-batch of mini-batch j on either rank clips at `qurl_bounds` of j's tokens of both
    ranks; the step's `qurl/gap` is the mean of the updates' gaps."""
    ranks, per_rank = [], []
    for r in range(WORLD):
        old, rollout, new, adv, mask = _batch(10 + r, b=8, t=6, noise=0.4 * (r + 1))
        w = torch.exp((old - rollout).clamp(-20, 20)) * mask
        per_rank.append((w, mask))
        ranks.append({"old_log_probs": old.tolist(), "new_log_probs": new.detach().tolist(),
                      "response_mask": mask.tolist(), "advantages": adv.tolist(),
                      "rollout_is_weights": w.tolist()})  # fmt: skip
    spec = tmp_path / "verl_loss.json"
    spec.write_text(json.dumps({"clip_c": 3.0, "calib": None}))
    case = {"loss": "fp8rl_qurl", "mini": MINI, "micro": MICRO, "ranks": ranks,
            "actor": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}}  # fmt: skip
    results = run_ranks(case, tmp_path / "dp", WORLD, spec, timeout_s=300)
    assert all("error" not in r for r in results), [r.get("traceback", "")[-2000:] for r in results]

    gaps, per_micro = [], MINI // MICRO
    for j in range(8 // MINI):
        rows = slice(j * MINI, (j + 1) * MINI)
        w = torch.cat([pw[rows] for pw, _ in per_rank])
        m = torch.cat([pm[rows] for _, pm in per_rank]).bool()
        bounds, metrics = qurl_bounds(w, torch.ones_like(w), m, FIXED)
        gaps.append(metrics["qurl/gap"])
        used = [b for r in results for b in r["micro_qurl"][j * per_micro : (j + 1) * per_micro]]
        assert len(used) == WORLD * per_micro
        for low, high in used:
            assert low == pytest.approx(bounds.low, rel=1e-12) and high == pytest.approx(
                bounds.high, rel=1e-12
            )
    assert gaps[0] != pytest.approx(gaps[1])  # two updates, two gaps
    logged = results[0]["metrics"]["qurl/gap"]
    assert float(sum(logged) / len(logged)) == pytest.approx(sum(gaps) / len(gaps), rel=1e-9)
    assert results[0]["forward_only_calls"] == 0  # the gap needs no forward pass


def test_the_cell_composes_and_validates_in_verl(compose, capsys):  # noqa: F811 (the fixture)
    composed_paper_cell(compose, "fp8_qurl")
    capsys.readouterr()
