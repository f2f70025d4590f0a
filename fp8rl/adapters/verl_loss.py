"""fp8rl's policy losses inside verl: `fp8rl_clip` and `calibrated_clip`, registered on import.

Both are registered through fp8rl.adapters.verl_policy (`verl_policy_loss`: `fp8rl.rl.policy_loss`, the
same function the reference trainer uses, checked inputs, verl's global aggregation, the metrics as
weighted pairs); this module also imports the correction losses (fp8rl.adapters.verl_icepop,
verl_qurl), so that verl's one plugin import registers every fp8rl loss:

- `fp8rl_clip`: fixed bounds `(1 - clip_ratio_low, 1 + clip_ratio_high)` from verl's actor config: the
  PPO-clip objective of verl's `vanilla`, plus the docs/architecture.md#metrics `clip/*` diagnostics on every run (the
  bf16 runs' clip fractions are what `calib.reference: run` reads).
- `calibrated_clip`: bounds from `fp8rl.rl.Calibrator` (docs/architecture.md#calibrated-clipping), one per
  worker process, as the reference trainer sets them per update (fp8rl.engine.update_bounds): with
  `calib.reference: run` the bf16 run's targets of this step (`step_targets`: the first-update
  correction), and the step's first update clipping nothing below (`ref_unchanged`). The step and
  update come from fp8rl.adapters.verl_update (installed here, in every worker), which also runs
  `update_bounds` before each mini-batch: one pair of bounds per update, set on the ratios of all its
  micro-batches and DP ranks (a forward-only pass before verl splits the mini-batch), as the reference
  trainer sets them on the update's whole mini-batch.

Both log the `clip/*` and `ratio/p01|p50|p99` of each micro-batch, every one as a weighted pair
(`LOSS_METRICS`): verl gathers each key over the DP ranks and requires every rank to have logged it
equally often, and fp8rl.adapters.verl_update.fold turns the pairs into the update's values: the clip
fractions and `loss/ppo_kl` over the update's pooled population (all micro-batches, all ranks), the
quantiles as means of per-micro-batch values (the bounds are the same on every micro-batch).

The dual clip `clip_c` and the calibration options come from the JSON file named by the
`FP8RL_VERL_LOSS` environment variable (`verl_overrides.loss_spec`); without it, `clip_c` falls back to
verl's `clip_ratio_c` and calibration cannot run.

A NaN/inf log-prob, old log-prob, advantage or rollout weight at a valid token is a divergence (the
reference trainer's `non_finite`): the loss writes `DIVERGENCE_FILE` beside the spec (the run
directory) and raises `NonFiniteLoss`, which stops verl; the run's import
(fp8rl.adapters.verl_run.finish_run) reads the file and records the run `diverged`, not `failed`, so it
is neither resubmitted nor lost.

verl loads this module in every Ray worker through `VERL_USE_EXTERNAL_MODULES=fp8rl.adapters.verl_loss`.
"""

from __future__ import annotations

from typing import Any

import torch

from fp8rl.adapters import verl_acc, verl_retention, verl_update
from fp8rl.adapters.verl_launch import DIVERGENCE_FILE  # noqa: F401  (where a divergence is recorded)
from fp8rl.adapters.verl_policy import (  # noqa: F401  (this module's names, as before the split)
    LOSS_METRICS,
    PLAIN_METRICS,
    SPEC_ENV,
    LossCall,
    NonFiniteLoss,
    check_finite_inputs,
    clip_range,
    load_spec,
    reset_spec,
    token_ratio,
    verl_policy_loss,
)
from fp8rl.config import CalibConfig
from fp8rl.rl import ClipBounds
from fp8rl.rl.calibration import Calibrator, step_targets

_calibrator: Calibrator | None = None


def reset() -> None:
    """Forget the cached spec and calibrator (tests; a worker re-reading a changed spec)."""
    global _calibrator
    reset_spec()
    _calibrator = None


fp8rl_clip_loss = verl_policy_loss(
    "fp8rl_clip",
    "PPO-clip with fixed bounds through `fp8rl.rl.policy_loss` (verl's `vanilla` + fp8rl's clip "
    "diagnostics).",
)


def calibrator(config: Any) -> Calibrator:
    """This process's calibrator, built once from verl's clip ratios and the spec's calib section (a
    `CalibConfig`, through the same constructor as the reference trainer's)."""
    global _calibrator
    if _calibrator is None:
        calib = load_spec().get("calib")
        if not calib:
            raise RuntimeError(
                f"calibrated_clip: no calibration options; set {SPEC_ENV} to the run's verl_loss.json "
                "(fp8rl verl train writes it)"
            )
        options = {k: v for k, v in calib.items() if k in CalibConfig.model_fields}
        clip_low, clip_high = clip_range(config)
        _calibrator = Calibrator.from_config(
            CalibConfig.model_validate(options), clip_low=clip_low, clip_high=clip_high
        )
    return _calibrator


def _bounds_now(
    config: Any, ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[ClipBounds, dict[str, float]]:
    """The calibrated bounds of the update verl is in, and their `calib/*` metrics, from the update's
    ratios (`mask` selects its valid tokens). With a cadence (`calib.every`: N) the bounds are computed
    in steps 1, N + 1, 2N + 1, ... and held in between, as the reference trainer's `UpdateBounds` holds
    them (`Calibrator.due`, `hold`); a worker that resumed from a save holds nothing yet, so it
    recalibrates in its first step."""
    cal = calibrator(config)
    calib = load_spec()["calib"]
    pos = verl_update.POSITION
    if pos.step is None or pos.update < 1:
        raise RuntimeError(
            "calibrated_clip: no training step is known in this process (fp8rl.adapters.verl_update "
            "keeps it in verl's actor workers, where verl calls the loss)"
        )
    if not cal.due(pos.step):
        return cal.held_bounds()
    q = q_high = None
    if cal.reference.mode == "run":
        if calib.get("targets") is None:
            raise RuntimeError(f"calibrated_clip: calib.reference is 'run' but {SPEC_ENV} holds no targets")
        targets = {int(k): (v[0], v[1]) for k, v in calib["targets"].items()}
        q, q_high = step_targets(targets, pos.step, int(calib["updates_per_step"]))
    bounds, metrics = cal.bounds(
        ratio, advantages, mask, target_q=q, target_q_high=q_high, ref_unchanged=pos.first_update
    )
    cal.hold(bounds, first_update=pos.first_update)
    return bounds, metrics


def _calibrated_bounds(call: LossCall) -> tuple[ClipBounds, dict[str, float]]:
    """The update's bounds that `update_bounds` set before verl split the mini-batch; without them (a
    direct call: the micro-batch is the whole update) this micro-batch's own."""
    prepared = verl_update.POSITION.prepared
    if prepared is not None:
        return prepared
    ratio = token_ratio(call.log_prob, call.old_log_prob)
    return _bounds_now(call.config, ratio, call.advantages, call.response_mask.bool())


def _engine_defaults(worker: Any, data: Any) -> None:
    """The engine keys verl 0.9.1's `TrainingWorker.train_batch` gives a mini-batch that lacks them, so
    the forward below splits it into the micro-batches the update's forward uses."""
    from verl.utils import tensordict_utils as tu

    engine = worker.engine_config
    defaults = {
        "use_remove_padding": worker.model_config.get("use_remove_padding", False),
        "use_dynamic_bsz": engine.use_dynamic_bsz,
        "max_token_len_per_gpu": engine.max_token_len_per_gpu,
        "micro_batch_size_per_gpu": engine.micro_batch_size_per_gpu,
        "use_fused_kernels": engine.use_fused_kernels,
    }
    for key, value in defaults.items():
        if key not in data.keys():  # noqa: SIM118 (a TensorDict refuses `in`)
            tu.assign_non_tensor(data, **{key: value})


def update_bounds(worker: Any, data: Any) -> tuple[ClipBounds, dict[str, float]] | None:
    """The calibrated bounds of one mini-batch update, the same on every DP rank, as the reference
    trainer sets them (one pair per update, from all of its tokens): a forward-only pass of the actor over
    this rank's mini-batch (verl's engine `infer_batch`, in the micro-batches of the update) gives the
    current ratios at its valid tokens, the DP group all-gathers them with their advantages, and the
    calibrator sets the bounds on the pooled tokens. None on ranks where verl computes no loss (not the
    last pipeline stage). A non-finite input on any rank is raised on every rank after the gather (the
    rank that holds it records the divergence), so no rank waits for another in a collective.

    Run by fp8rl.adapters.verl_update before each mini-batch of a `calibrated_clip` worker: one more
    forward of the update's tokens (no backward)."""
    from verl.workers.utils.padding import no_padding_2_padding

    _engine_defaults(worker, data)
    parts: list[tuple[torch.Tensor, torch.Tensor]] = []
    bad: list[str] = []

    def probe(model_output: dict, data: Any, dp_group: Any = None) -> tuple[torch.Tensor, dict]:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        mb = data.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
        mask = mb["response_mask"].bool()
        adv = mb["advantages"] if mb["advantages"].dim() == mask.dim() else mb["advantages"].unsqueeze(-1)
        try:
            check_finite_inputs(
                log_prob=log_prob,
                old_log_prob=mb["old_log_probs"],
                advantages=mb["advantages"],
                response_mask=mask,
            )
        except NonFiniteLoss as exc:
            bad.append(str(exc))
        else:
            ratio = token_ratio(log_prob, mb["old_log_probs"])
            parts.append((ratio[mask].cpu(), adv.expand_as(mask)[mask].detach().cpu()))
        return torch.zeros((), device=log_prob.device), {}

    with torch.no_grad():
        worker.engine.infer_batch(data, loss_function=probe)
    local = (
        torch.cat([r for r, _ in parts]) if parts else torch.zeros(0),
        torch.cat([a for _, a in parts]) if parts else torch.zeros(0),
        bool(parts or bad),
        bad,
    )
    gathered = verl_update.dp_gather(worker, local)
    problems = [msg for g in gathered for msg in g[3]]
    if problems:
        raise NonFiniteLoss(problems[0] if bad else f"another data-parallel rank: {problems[0]}")
    if not local[2]:
        return None
    ratio = torch.cat([g[0] for g in gathered]).unsqueeze(0)  # the pooled tokens as one [1, N] row
    advantages = torch.cat([g[1] for g in gathered]).unsqueeze(0)
    config = worker.loss_fn.keywords["config"]
    return _bounds_now(config, ratio, advantages, torch.ones_like(ratio, dtype=torch.bool))


calibrated_clip_loss = verl_policy_loss(
    "calibrated_clip",
    "PPO-clip whose bounds come from calibrated clipping (docs/architecture.md#calibrated-clipping) on "
    "the update's ratios over all its micro-batches and DP ranks (`update_bounds`).",
    bounds_of=_calibrated_bounds,
)


verl_update.PREPARE["calibrated_clip"] = update_bounds
verl_update.install()
verl_acc.install()  # the step's acc/mean, in the trainer's process
verl_retention.install()  # the actor's checkpoint retention counts the chain's earlier saves


from fp8rl.adapters import verl_icepop, verl_qurl  # noqa: E402,F401  (register the correction losses)
