"""fp8rl's policy losses inside verl: `fp8rl_clip` and `calibrated_clip`, registered on import.

verl's actor calls a registered policy loss as `fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)` and expects `(loss, metrics)`. Both losses here are
`fp8rl.rl.policy_loss` (the same function the reference trainer uses) with verl's rollout-correction
weights as `is_weights`:

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
verl's `clip_ratio_c` and calibration cannot run. The loss is rescaled from fp8rl's local aggregation to
verl's global one (`config.global_batch_info`: dp_size, batch_num_tokens, global_batch_size), so
gradient accumulation over micro-batches and data-parallel ranks matches verl's `agg_loss`.

A NaN/inf log-prob, old log-prob or advantage at a valid token is a divergence (the reference trainer's
`non_finite`): the loss writes `DIVERGENCE_FILE` beside the spec (the run directory) and raises
`NonFiniteLoss`, which stops verl; the run's import (fp8rl.adapters.verl_run.finish_run) reads the file
and records the run `diverged`, not `failed`, so it is neither resubmitted nor lost.

verl loads this module in every Ray worker through `VERL_USE_EXTERNAL_MODULES=fp8rl.adapters.verl_loss`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo.core_algos import register_policy_loss

from fp8rl.adapters import verl_acc, verl_update
from fp8rl.adapters.verl_launch import DIVERGENCE_FILE
from fp8rl.config import CalibConfig
from fp8rl.rl import LOG_RATIO_CLAMP, ClipBounds, LossTerms, policy_loss, ratio_quantiles
from fp8rl.rl.calibration import Calibrator, step_targets
from fp8rl.vocabulary import (
    CALIB_FLOOR_BINDS,
    CALIB_HIGH,
    CALIB_LOW,
    CLIP_DUAL,
    CLIP_HIGH_ALL,
    CLIP_HIGH_POS,
    CLIP_LOW_ALL,
    CLIP_LOW_NEG,
)

SPEC_ENV = "FP8RL_VERL_LOSS"

# Every metric the losses log, as a weighted pair on every micro-batch (verl_update.fold): name -> the
# population its value is a fraction or mean over (its weight), or None: one per micro-batch that has it.
LOSS_METRICS: dict[str, str | None] = {
    CLIP_LOW_NEG: "neg",
    CLIP_DUAL: "neg",
    CLIP_HIGH_POS: "pos",
    CLIP_LOW_ALL: "tokens",
    CLIP_HIGH_ALL: "tokens",
    "loss/ppo_kl": "tokens",
    "actor/ppo_kl": "tokens",
    "loss/pg": None,
    "ratio/p01": None,
    "ratio/p50": None,
    "ratio/p99": None,
    CALIB_LOW: None,
    CALIB_HIGH: None,
    "calib/target_q": None,
    "calib/target_q_high": None,
    CALIB_FLOOR_BINDS: None,
}
PLAIN_METRICS = ("loss/tokens",)  # logged by every micro-batch as it is


class NonFiniteLoss(FloatingPointError):
    """A non-finite input of the policy loss: the run diverged (recorded in `DIVERGENCE_FILE`)."""


def check_finite_inputs(**tensors: torch.Tensor | None) -> None:
    """Record and raise a divergence (module docstring) when a tensor holds NaN/inf at a valid token
    (`response_mask`, a keyword argument, selects the tokens)."""
    mask = tensors.pop("response_mask").bool()
    bad = {}
    for name, t in tensors.items():
        if t is not None:
            n = int((~torch.isfinite(t.detach()) & (mask if t.dim() == mask.dim() else mask.any(-1))).sum())
            if n:
                bad[name] = n
    if not bad:
        return
    what = ", ".join(f"{name} ({n} tokens)" for name, n in bad.items())
    reason = f"non-finite {what} in the policy loss"
    path = os.environ.get(SPEC_ENV)
    if path:
        from fp8rl.io import atomic_write_json

        atomic_write_json(
            os.path.join(os.path.dirname(path), DIVERGENCE_FILE), {"kind": "non_finite", "what": reason}
        )
    raise NonFiniteLoss(f"fp8rl: {reason}: the run diverged" + (f" (recorded beside {path})" if path else ""))


_spec_cache: dict[str, Any] | None = None
_calibrator: Calibrator | None = None


def load_spec(reload: bool = False) -> dict[str, Any]:
    """The loss spec from `$FP8RL_VERL_LOSS` (a JSON file path); `{}` when the variable is unset."""
    global _spec_cache
    if _spec_cache is None or reload:
        path = os.environ.get(SPEC_ENV)
        if not path:
            _spec_cache = {}
        else:
            try:
                with open(path) as fh:
                    _spec_cache = json.load(fh)
            except (OSError, json.JSONDecodeError) as exc:
                raise RuntimeError(f"{SPEC_ENV}={path}: cannot read the fp8rl loss spec ({exc})") from None
    return _spec_cache


def reset() -> None:
    """Forget the cached spec and calibrator (tests; a worker re-reading a changed spec)."""
    global _spec_cache, _calibrator
    _spec_cache, _calibrator = None, None


def _cfg(config: Any, key: str, default: Any = None) -> Any:
    getter = getattr(config, "get", None)
    value = getter(key, default) if getter is not None else getattr(config, key, default)
    return default if value is None else value


def _clip_c(config: Any, spec: dict[str, Any]) -> float | None:
    if "clip_c" in spec:
        return None if spec["clip_c"] is None else float(spec["clip_c"])
    return float(_cfg(config, "clip_ratio_c", 3.0))


def _clip_range(config: Any) -> tuple[float, float]:
    clip = float(_cfg(config, "clip_ratio", 0.2))
    return float(_cfg(config, "clip_ratio_low", clip)), float(_cfg(config, "clip_ratio_high", clip))


def _global_scale(mask: torch.Tensor, loss_agg_mode: str, info: dict[str, Any]) -> float:
    """Factor turning fp8rl's local aggregation into verl's global one (1.0 without global info)."""
    dp_size = int(info.get("dp_size") or 1)
    if loss_agg_mode == "token-mean":
        total = info.get("batch_num_tokens")
        local = float(mask.sum())
    else:
        total = info.get("global_batch_size")
        local = float((mask.sum(dim=-1) > 0).sum())
    if total is None:
        if dp_size > 1:
            raise ValueError(
                f"verl global_batch_info lacks the global count for {loss_agg_mode} (dp_size > 1)"
            )
        return 1.0
    total = float(total)
    return 0.0 if total == 0 else local / total * dp_size


def _metrics(m: dict[str, float], advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The same keys for every micro-batch (module docstring): `PLAIN_METRICS` as they are, each of
    `LOSS_METRICS` as `WEIGHTED_SUM + name` (value x weight) and `WEIGHTED_N + name` (weight: its
    population's size, or 1; both 0 when the micro-batch has no value), with `actor/ppo_kl` (verl's name
    for `loss/ppo_kl`, so verl's dashboards keep working). RuntimeError on a metric outside both lists:
    one logged by some micro-batches only would stop verl's DP aggregation."""
    m = dict(m)
    if "loss/ppo_kl" in m:
        m["actor/ppo_kl"] = m["loss/ppo_kl"]
    unknown = sorted(set(m) - set(LOSS_METRICS) - set(PLAIN_METRICS))
    if unknown:
        raise RuntimeError(
            f"fp8rl verl loss: metrics {unknown} are in neither LOSS_METRICS nor PLAIN_METRICS"
        )
    with torch.no_grad():
        adv = advantages.detach() if advantages.dim() == mask.dim() else advantages.detach().unsqueeze(-1)
        sizes = {
            "tokens": float(mask.sum()),
            "neg": float((mask & (adv < 0)).sum()),
            "pos": float((mask & (adv > 0)).sum()),
        }
    out = {name: float(m[name]) for name in PLAIN_METRICS if name in m}
    for name, population in LOSS_METRICS.items():
        weight = 0.0 if name not in m else 1.0 if population is None else sizes[population]
        out[verl_update.WEIGHTED_SUM + name] = float(m[name]) * weight if weight else 0.0
        out[verl_update.WEIGHTED_N + name] = weight
    return out


def _ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """The importance ratio exp(log_prob - old_log_prob), the log-ratio clamped as `policy_loss` clamps it."""
    with torch.no_grad():
        return torch.exp(
            torch.clamp(log_prob.detach() - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        )


def _run(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: Any,
    rollout_is_weights: torch.Tensor | None,
    bounds: ClipBounds | None,
    extra: dict[str, float],
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = response_mask.bool()
    clip_low, clip_high = _clip_range(config)
    loss, m = policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        mask,
        bounds if bounds is not None else ClipBounds.fixed(clip_low, clip_high),
        LossTerms(clip_c=_clip_c(config, load_spec()), loss_agg_mode=loss_agg_mode),
        is_weights=rollout_is_weights,
    )
    info = dict(_cfg(config, "global_batch_info", {}) or {})
    loss = loss * _global_scale(mask, loss_agg_mode, info)
    with torch.no_grad():
        quantiles = ratio_quantiles(_ratio(log_prob, old_log_prob), mask) if bool(mask.any()) else {}
    return loss, _metrics({**m, **quantiles, **extra}, advantages, mask)


# (config, old_log_prob, log_prob, advantages, response_mask) -> (bounds or None: the fixed ones, metrics)
_Bounds = Callable[
    [Any, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[ClipBounds | None, dict]
]


def _verl_policy_loss(name: str, bounds_of: _Bounds, doc: str) -> Callable[..., tuple[torch.Tensor, dict]]:
    """The policy loss verl registers under `name`, with verl's signature: the inputs checked (a
    non-finite one is a divergence), then `policy_loss` under the bounds and extra metrics that
    `bounds_of(config, old_log_prob, log_prob, advantages, response_mask)` returns (None: the fixed ones)."""

    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if config is None:
            raise ValueError(f"{name}: verl passes the actor config; got None")
        check_finite_inputs(
            log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages, response_mask=response_mask
        )
        bounds, extra = bounds_of(config, old_log_prob, log_prob, advantages, response_mask)
        return _run(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
            bounds,
            extra,
        )

    loss.__name__ = loss.__qualname__ = f"{name}_loss"
    loss.__doc__ = doc
    return register_policy_loss(name)(loss)


def _fixed_bounds(config: Any, *_: torch.Tensor) -> tuple[None, dict]:
    return None, {}


fp8rl_clip_loss = _verl_policy_loss(
    "fp8rl_clip",
    _fixed_bounds,
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
        clip_low, clip_high = _clip_range(config)
        _calibrator = Calibrator.from_config(
            CalibConfig.model_validate(options), clip_low=clip_low, clip_high=clip_high
        )
    return _calibrator


def _bounds_now(
    config: Any, ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[ClipBounds, dict[str, float]]:
    """The calibrated bounds of the update verl is in, and their `calib/*` metrics, from the update's
    ratios (`mask` selects its valid tokens)."""
    cal = calibrator(config)
    calib = load_spec()["calib"]
    pos = verl_update.POSITION
    if pos.step is None or pos.update < 1:
        raise RuntimeError(
            "calibrated_clip: no training step is known in this process (fp8rl.adapters.verl_update "
            "keeps it in verl's actor workers, where verl calls the loss)"
        )
    q = q_high = None
    if cal.reference.mode == "run":
        if calib.get("targets") is None:
            raise RuntimeError(f"calibrated_clip: calib.reference is 'run' but {SPEC_ENV} holds no targets")
        targets = {int(k): (v[0], v[1]) for k, v in calib["targets"].items()}
        q, q_high = step_targets(targets, pos.step, int(calib["updates_per_step"]))
    return cal.bounds(
        ratio, advantages, mask, target_q=q, target_q_high=q_high, ref_unchanged=pos.first_update
    )


def _calibrated_bounds(
    config: Any,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[ClipBounds, dict[str, float]]:
    """The update's bounds that `update_bounds` set before verl split the mini-batch; without them (a
    direct call: the micro-batch is the whole update) this micro-batch's own."""
    prepared = verl_update.POSITION.prepared
    if prepared is not None:
        return prepared
    return _bounds_now(config, _ratio(log_prob, old_log_prob), advantages, response_mask.bool())


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
    import torch.distributed as dist
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
            ratio = _ratio(log_prob, mb["old_log_probs"])
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
    group = worker.engine.get_data_parallel_group()
    gathered = [local]
    if group is not None and dist.is_initialized() and dist.get_world_size(group) > 1:
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, local, group=group)
    problems = [msg for g in gathered for msg in g[3]]
    if problems:
        raise NonFiniteLoss(problems[0] if bad else f"another data-parallel rank: {problems[0]}")
    if not local[2]:
        return None
    ratio = torch.cat([g[0] for g in gathered]).unsqueeze(0)  # the pooled tokens as one [1, N] row
    advantages = torch.cat([g[1] for g in gathered]).unsqueeze(0)
    config = worker.loss_fn.keywords["config"]
    return _bounds_now(config, ratio, advantages, torch.ones_like(ratio, dtype=torch.bool))


calibrated_clip_loss = _verl_policy_loss(
    "calibrated_clip",
    _calibrated_bounds,
    "PPO-clip whose bounds come from calibrated clipping (docs/architecture.md#calibrated-clipping) on "
    "the update's ratios over all its micro-batches and DP ranks (`update_bounds`).",
)


verl_update.PREPARE["calibrated_clip"] = update_bounds
verl_update.install()
verl_acc.install()  # the step's acc/mean, in the trainer's process


from fp8rl.adapters import verl_icepop  # noqa: E402,F401  (registers fp8rl_icepop_adaptive)
