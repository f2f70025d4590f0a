"""The fp8rl losses called through verl's own policy-loss registry, on CPU tensors."""

from __future__ import annotations

import json

import pytest
import torch

from fp8rl.rl import ClipBounds, LossTerms, calibrated_bounds, policy_loss


def _batch(seed: int = 0, b: int = 8, t: int = 12, noise: float = 0.15):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3.0
    new = old + noise * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g).unsqueeze(1).expand(b, t).contiguous()
    mask = torch.ones(b, t)
    for i in range(b):
        mask[i, 4 + (i % 7) :] = 0.0
    rollout_w = torch.clamp(torch.exp(0.05 * torch.randn(b, t, generator=g)), max=2.0)
    return old, new.requires_grad_(True), adv, mask, rollout_w


def _actor_config(clip_low=0.2, clip_high=0.28, clip_c=3.0, agg="token-mean", typed=False):
    """The actor config verl hands a policy loss: a DictConfig, or (typed) verl's McoreActorConfig."""
    from omegaconf import OmegaConf

    if typed:
        from verl.workers.config import McoreActorConfig

        return McoreActorConfig(
            rollout_n=4, use_dynamic_bsz=True, clip_ratio_low=clip_low, clip_ratio_high=clip_high,
            clip_ratio_c=clip_c, loss_agg_mode=agg,
        )  # fmt: skip
    return OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": clip_low,
            "clip_ratio_high": clip_high,
            "clip_ratio_c": clip_c,
            "loss_agg_mode": agg,
            "global_batch_info": {},
            "policy_loss": {"loss_mode": "fp8rl_clip"},
        }
    )


def _fold(metrics: dict) -> dict:
    """One micro-batch's metrics as verl's update logs them (fp8rl.adapters.verl_update.fold)."""
    from fp8rl.adapters import verl_update

    return verl_update.fold(metrics)


@pytest.fixture
def registry(verl_site, monkeypatch, tmp_path):
    """verl's registry with fp8rl's losses registered; the loss spec read from a temp file."""
    from verl.trainer.ppo import core_algos

    import fp8rl.adapters.verl_loss as vl

    spec = tmp_path / "verl_loss.json"

    def set_spec(obj: dict) -> None:
        spec.write_text(json.dumps(obj))
        monkeypatch.setenv(vl.SPEC_ENV, str(spec))
        vl.reset()

    # where verl's actor would be: a later update of step 3 (fp8rl.adapters.verl_update keeps it)
    monkeypatch.setattr(vl.verl_update, "POSITION", vl.verl_update.UpdatePosition(step=3, update=2))
    yield core_algos, set_spec
    vl.reset()


def test_losses_are_registered_under_their_names(registry):
    core_algos, _ = registry
    assert core_algos.get_policy_loss_fn("fp8rl_clip").__name__ == "fp8rl_clip_loss"
    assert core_algos.get_policy_loss_fn("calibrated_clip").__name__ == "calibrated_clip_loss"


@pytest.mark.parametrize(
    ("agg", "typed"),
    [
        ("token-mean", False),
        ("seq-mean-token-mean", False),
        ("seq-mean-token-sum", False),
        ("token-mean", True),
    ],
)
def test_fp8rl_clip_equals_verl_vanilla(registry, agg, typed):
    """Same objective as verl's own PPO-clip with dual clip and rollout-correction weights: loss and grads."""
    core_algos, set_spec = registry
    set_spec({"clip_c": 3.0, "calib": None})
    old, new, adv, mask, w = _batch(noise=1.0)  # r > clip_c happens: dual clip exercised
    cfg = _actor_config(agg=agg, typed=typed)
    ours, metrics = core_algos.get_policy_loss_fn("fp8rl_clip")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask.bool(), loss_agg_mode=agg,
        config=cfg, rollout_is_weights=w,
    )  # fmt: skip
    metrics = _fold(metrics)
    (g_ours,) = torch.autograd.grad(ours, new)
    ref, ref_metrics = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask, loss_agg_mode=agg, config=cfg,
        rollout_is_weights=w,
    )  # fmt: skip
    (g_ref,) = torch.autograd.grad(ref, new)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-7)
    assert metrics["actor/ppo_kl"] == pytest.approx(ref_metrics["actor/ppo_kl"], rel=1e-5, abs=1e-7)
    assert {"clip/low_neg", "clip/high_pos", "clip/low_all", "clip/dual", "ratio/p01", "ratio/p99"} <= set(
        metrics
    )


def test_global_batch_info_matches_verl_aggregation(registry):
    """With verl's global counts (dp ranks, micro-batches) the loss is rescaled exactly as verl's agg_loss."""
    core_algos, set_spec = registry
    set_spec({"clip_c": 3.0, "calib": None})
    old, new, adv, mask, w = _batch(seed=3)
    for agg, info in [
        ("token-mean", {"dp_size": 4, "batch_num_tokens": 310, "global_batch_size": 32}),
        ("seq-mean-token-mean", {"dp_size": 2, "batch_num_tokens": 200, "global_batch_size": 20}),
    ]:
        cfg = _actor_config(agg=agg)
        cfg.global_batch_info = info
        ours, _ = core_algos.get_policy_loss_fn("fp8rl_clip")(old, new, adv, mask, agg, cfg, w)
        ref, _ = core_algos.get_policy_loss_fn("vanilla")(old, new, adv, mask, agg, cfg, w)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_calibrated_clip_through_registry_equals_fp8rl(registry):
    """calibrated_clip via verl's registry == fp8rl.rl.policy_loss with calibrated_bounds' bounds."""
    core_algos, set_spec = registry
    old, new, adv, mask, w = _batch(seed=1, b=16, t=16, noise=0.3)
    q = 0.04
    set_spec({
        "clip_c": 10.0,
        "calib": {"reference": f"static:{q}", "population": "all", "upper": "proportional",
                  "low_range": [0.5, 1.0], "momentum": 0.0, "targets": None, "updates_per_step": 4},
    })  # fmt: skip
    cfg = _actor_config(clip_low=0.2, clip_high=0.28, clip_c=10.0)
    fn = core_algos.get_policy_loss_fn("calibrated_clip")
    loss, metrics = fn(old, new, adv, mask.bool(), "token-mean", cfg, w)
    metrics = _fold(metrics)

    ratio = torch.exp(new.detach() - old)
    # With a static target quantile q, the bounds are calibrated_bounds' with a reference whose clip
    # fraction is q: build R_ref with exactly that fraction below 1 - clip_low.
    n = int(mask.sum())
    ref = torch.ones_like(ratio)
    idx = mask.bool().flatten().nonzero().flatten()[: round(q * n)]
    ref.view(-1)[idx] = 0.5
    low, high = calibrated_bounds(
        ratio, ref, adv, mask.bool(), clip_low=0.2, clip_high=0.28, population="all"
    )
    expect, _ = policy_loss(
        new,
        old,
        adv,
        mask.bool(),
        ClipBounds(low, high),
        LossTerms(clip_c=10.0),
        is_weights=w,
    )
    torch.testing.assert_close(loss, expect)
    assert metrics["calib/low"] == pytest.approx(float(low))
    assert metrics["calib/high"] == pytest.approx(float(high))
    assert metrics["calib/target_q"] == pytest.approx(q)
    assert float(low) < 0.8  # a real calibration happened: FP8-noisy ratios need a lower L than 1 - 0.2


def test_calibrated_clip_without_spec_is_a_clear_error(registry, monkeypatch):
    core_algos, _ = registry
    import fp8rl.adapters.verl_loss as vl

    monkeypatch.delenv(vl.SPEC_ENV, raising=False)
    vl.reset()
    old, new, adv, mask, w = _batch()
    with pytest.raises(RuntimeError, match="FP8RL_VERL_LOSS"):
        core_algos.get_policy_loss_fn("calibrated_clip")(
            old, new, adv, mask, "token-mean", _actor_config(), w
        )


@pytest.mark.parametrize("loss", ["fp8rl_clip", "calibrated_clip"])
def test_a_non_finite_input_is_recorded_as_the_runs_divergence(registry, loss, tmp_path):
    """verl's own computations pass a NaN on; fp8rl's loss stops verl and leaves the record the run's
    import reads (fp8rl.adapters.verl_run.finish_run: `diverged`, not `failed`)."""
    import fp8rl.adapters.verl_loss as vl

    core_algos, set_spec = registry
    set_spec(
        {"clip_c": 3.0, "calib": {"reference": "static:0.05", "population": "neg", "upper": "proportional"}}
    )
    old, new, adv, mask, w = _batch()
    adv = adv.clone()
    adv[0, 0] = float("nan")  # a valid token (mask[0, :4] is 1)
    cfg = _actor_config()
    with pytest.raises(vl.NonFiniteLoss, match=r"advantages \(1 tokens\)"):
        core_algos.get_policy_loss_fn(loss)(
            old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask.bool(),
            loss_agg_mode="token-mean", config=cfg, rollout_is_weights=w,
        )  # fmt: skip
    record = json.loads((tmp_path / vl.DIVERGENCE_FILE).read_text())
    assert record["kind"] == "non_finite" and "advantages" in record["what"]
    adv[0, 0] = 0.0
    adv[0, 11] = float("nan")  # padding: not a divergence
    core_algos.get_policy_loss_fn(loss)(
        old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask.bool(), loss_agg_mode="token-mean",
        config=cfg, rollout_is_weights=w,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("upper", "first"), [("proportional", False), ("proportional", True), ("quantile", False)]
)
def test_calibrated_clip_sets_the_reference_trainers_bounds_for_each_update(registry, upper, first):
    """`calib.reference: run`: the verl loss, through verl's registry, clips each update with the bounds
    the reference trainer's UpdateBounds gives the same ratios, targets, step and update: the bf16 run's
    targets of that step with the first-update correction, nothing clipped below in the first update."""
    from types import SimpleNamespace

    import fp8rl.adapters.verl_loss as vl
    from fp8rl.config import CalibConfig
    from fp8rl.engine.phase_timer import PhaseTimer
    from fp8rl.engine.update_bounds import UpdateBounds
    from fp8rl.rl import Calibrator, ClipBounds

    core_algos, set_spec = registry
    old, new, adv, mask, w = _batch(seed=2, b=16, t=16, noise=0.3)
    targets = {2: (0.01, 0.02), 3: (0.03, 0.04), 4: (0.05, None)}
    options = {
        "reference": "run",
        "population": "neg",
        "upper": upper,
        "low_range": [0.5, 1.0],
        "momentum": 0.0,
    }
    set_spec({"clip_c": 10.0, "calib": {**options, "targets": {str(k): list(v) for k, v in targets.items()},
                                        "updates_per_step": 4}})  # fmt: skip
    vl.verl_update.POSITION.update = 1 if first else 2
    _, metrics = core_algos.get_policy_loss_fn("calibrated_clip")(
        old, new, adv, mask.bool(), "token-mean", _actor_config(clip_low=0.2, clip_high=0.28, clip_c=10.0), w
    )
    metrics = _fold(metrics)
    reference = UpdateBounds(
        ClipBounds.fixed(0.2, 0.28), calibrator=Calibrator.from_config(CalibConfig.model_validate(options),
                                                                       clip_low=0.2, clip_high=0.28),
        shadow=None, reference="run", run_targets=targets, updates_per_step=4, timer=PhaseTimer(),
    )  # fmt: skip
    mb = SimpleNamespace(advantages=adv, mask=mask.bool(), first_update=first)
    (low, high), want = reference.for_update(3, mb, torch.exp(new.detach() - old))
    assert metrics["calib/low"] == pytest.approx(float(low)) and metrics["calib/high"] == pytest.approx(
        float(high)
    )
    assert metrics["calib/target_q"] == pytest.approx(want["calib/target_q"])
    assert want["calib/target_q"] == (0.0 if first else pytest.approx(0.03 * 4 / 3))  # step 3's, corrected
    if first:  # the policy has not moved: no negative-advantage token clipped below
        ratio = torch.exp(new.detach() - old)
        assert not bool(((ratio < low) & (adv < 0) & mask.bool()).any())


def test_calibrated_clip_holds_its_bounds_between_recalibrations_as_the_reference_trainer(registry):
    """`calib.every: 2`: over steps 1-5 of two updates each, the verl loss computes bounds in steps 1, 3
    and 5 and holds the last update's bounds through steps 2 and 4, exactly as the reference trainer's
    UpdateBounds does on the same ratios; without the cadence step 2's bounds would differ."""
    from types import SimpleNamespace

    import fp8rl.adapters.verl_loss as vl
    from fp8rl.config import CalibConfig
    from fp8rl.engine.phase_timer import PhaseTimer
    from fp8rl.engine.update_bounds import UpdateBounds
    from fp8rl.rl import Calibrator, ClipBounds

    core_algos, set_spec = registry
    targets = {s: (0.01 * s, 0.02) for s in range(1, 6)}
    options = {"reference": "run", "population": "neg", "upper": "proportional", "low_range": [0.5, 1.0],
               "momentum": 0.0, "every": 2}  # fmt: skip
    set_spec({"clip_c": 10.0, "calib": {**options, "targets": {str(k): list(v) for k, v in targets.items()},
                                        "updates_per_step": 2}})  # fmt: skip
    reference = UpdateBounds(
        ClipBounds.fixed(0.2, 0.28), calibrator=Calibrator.from_config(CalibConfig.model_validate(options),
                                                                       clip_low=0.2, clip_high=0.28),
        shadow=None, reference="run", run_targets=targets, updates_per_step=2, timer=PhaseTimer(),
    )  # fmt: skip
    got, want = [], []
    for step in range(1, 6):
        for update in (1, 2):
            old, new, adv, mask, w = _batch(seed=10 * step + update, b=16, t=16, noise=0.3)
            vl.verl_update.POSITION.step, vl.verl_update.POSITION.update = step, update
            _, metrics = core_algos.get_policy_loss_fn("calibrated_clip")(
                old, new, adv, mask.bool(), "token-mean", _actor_config(clip_low=0.2, clip_high=0.28, clip_c=10.0),
                w,
            )  # fmt: skip
            metrics = _fold(metrics)
            got.append((metrics["calib/low"], metrics["calib/high"]))
            mb = SimpleNamespace(advantages=adv, mask=mask.bool(), first_update=update == 1)
            (low, high), _ = reference.for_update(step, mb, torch.exp(new.detach() - old))
            want.append((float(low), float(high)))
    assert [b for pair in got for b in pair] == pytest.approx([b for pair in want for b in pair])
    assert got[2] == got[3] == got[1] and got[6] == got[7] == got[5]  # steps 2 and 4 hold the last bounds
    assert got[4] != got[1]  # step 3 recalibrated


def test_the_update_position_follows_verls_actor_worker(verl_site):
    """verl's TrainingWorker has the methods fp8rl.adapters.verl_update wraps; a resumed worker counts
    steps from its save, and mini-batch updates within a step from 1."""
    import inspect

    from verl.workers.engine_workers import TrainingWorker

    import fp8rl.adapters.verl_loss  # noqa: F401  (installs the wrapper, as verl's plugin import does)
    from fp8rl.adapters import verl_update

    assert getattr(TrainingWorker, "_fp8rl_update_position", False)
    assert list(inspect.signature(TrainingWorker.load_checkpoint.__wrapped__).parameters)[:2] == [
        "self",
        "local_path",
    ]

    class Worker:  # verl's call pattern: train_mini_batch calls train_batch once per mini-batch
        def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
            pass

        def train_mini_batch(self, data):
            return [self.train_batch(mb) for mb in range(data)]

        def train_batch(self, data):
            return (verl_update.POSITION.step, verl_update.POSITION.update)

    verl_update.wrap(Worker)
    w = Worker()
    w.load_checkpoint("/run/verl_checkpoints/global_step_40/actor")
    assert w.train_mini_batch(3) == [(41, 1), (41, 2), (41, 3)]
    assert w.train_mini_batch(2) == [(42, 1), (42, 2)]


@pytest.mark.parametrize("loss", ["fp8rl_clip", "calibrated_clip"])
def test_every_micro_batch_logs_the_same_metric_keys(registry, loss):
    """verl's DP aggregation needs every rank to log every key equally often: a micro-batch without A<0
    or A>0 tokens, or without any token, logs the keys of a full one (with zero weights)."""
    core_algos, set_spec = registry
    set_spec(
        {"clip_c": 3.0, "calib": {"reference": "static:0.05", "population": "neg", "upper": "proportional"}}
    )
    old, new, adv, mask, w = _batch()
    fn = core_algos.get_policy_loss_fn(loss)
    keys = []
    for a, m in [
        (adv, mask),
        (torch.zeros_like(adv), mask),
        (adv.abs(), mask),
        (adv, torch.zeros_like(mask)),
    ]:
        _, metrics = fn(old, new, a, m.bool(), "token-mean", _actor_config(), w)
        keys.append(sorted(metrics))
    assert all(k == keys[0] for k in keys)
