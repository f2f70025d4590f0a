"""The correction registry: each mismatch correction is one module of this package that registers one
function under its name (the module's own name; vocabulary `CORRECTIONS` lists them all), as verl registers a policy loss with
`register_policy_loss(name)` and looks it up with `get_policy_loss_fn(name)`; the trainer and the verl
adapter call `rollout_correction(kind, ...)` and never grow an if/elif per correction.

A registered function takes the step's `CorrectionInputs` (the trainer's and the sampler's log-probs of
the sampled tokens, and, for a correction that declares `needs_distributions`, their full next-token
distributions as logits) and the run's `CorrectionOptions`, and returns a `Correction`: detached
per-token weights that multiply the PPO loss, a per-sequence keep mask, an additive centering
coefficient (score centering) and its metrics. A correction that moves the clip bounds of each update
instead (QuRL's adaptive clip range) registers a `bounds` function of the update's FP8 ratios and their
full-precision (BF16 shadow) reference and declares `needs_shadow`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp8rl.rl._checks import check_finite, check_mask, check_same_shape
from fp8rl.rl.bounds import ClipBounds
from fp8rl.vocabulary import ADAPTIVE_ICEPOP_MASK_FRAC, CORRECTIONS, ICEPOP_BAND, MIS_BAND, TIS_LEVELS


@dataclass(frozen=True)
class Correction:
    """One batch's correction: `weights` [B, T] (detached, 0 at padding) multiply the per-token loss,
    `keep` [B] (bool) says which sequences stay in the loss, `centering` [B, T, V] (detached) is the
    score-centering coefficient of every vocabulary entry (`fp8rl.rl.corrections.scorecenter`); any of
    them is None when the correction has none."""

    weights: torch.Tensor | None
    keep: torch.Tensor | None
    metrics: dict[str, float]
    centering: torch.Tensor | None = None


@dataclass(frozen=True)
class CorrectionOptions:
    """The run's correction options (config `tis`): the truncation cap, the TIS level, the IcePop and
    masked-IS bands, adaptive IcePop's target masked fraction."""

    cap: float = 2.0
    level: str = "token"
    icepop: tuple[float, float] = ICEPOP_BAND
    mis: tuple[float, float] = MIS_BAND
    icepop_mask_frac: float = ADAPTIVE_ICEPOP_MASK_FRAC


@dataclass(frozen=True)
class CorrectionInputs:
    """What a correction sees of one rollout batch: `old_log_prob` (the trainer's), `rollout_log_prob`
    (the sampler's) [B, T] and the checked bool `mask`; `old_logits` / `rollout_logits` [B, T, V] (after
    the temperature) only for a correction that `needs_distributions`."""

    old_log_prob: torch.Tensor
    rollout_log_prob: torch.Tensor
    mask: torch.Tensor
    old_logits: torch.Tensor | None = None
    rollout_logits: torch.Tensor | None = None


# (update's FP8 ratio, its full-precision reference ratio, the reference's mask, fixed bounds)
#   -> (the update's bounds, metrics)
BoundsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, ClipBounds], tuple[ClipBounds, dict]]


@dataclass(frozen=True)
class CorrectionDef:
    """A registered correction: its per-batch function and what it needs from the trainer."""

    name: str
    fn: Callable[[CorrectionInputs, CorrectionOptions], Correction]
    needs_distributions: bool = False
    bounds: BoundsFn | None = None

    @property
    def needs_shadow(self) -> bool:
        """Whether each update needs full-precision (BF16 shadow) ratios: a `bounds` correction."""
        return self.bounds is not None


REGISTRY: dict[str, CorrectionDef] = {}


def register_correction(
    name: str, *, needs_distributions: bool = False, bounds: BoundsFn | None = None
) -> Callable:
    """Decorator: register `fn(inputs, options) -> Correction` under `name` (the module's own name for a
    new correction, which vocabulary `CORRECTIONS` then holds; a second registration of a name is an
    error)."""

    def deco(fn: Callable[[CorrectionInputs, CorrectionOptions], Correction]):
        if name not in CORRECTIONS:
            raise ValueError(
                f"register_correction: {name!r} is not in fp8rl.vocabulary.CORRECTIONS; a correction module "
                "registers its own file's name (fp8rl/rl/corrections/<name>.py)"
            )
        if name in REGISTRY:
            raise ValueError(f"register_correction: {name!r} is registered twice")
        REGISTRY[name] = CorrectionDef(name, fn, needs_distributions, bounds)
        return fn

    return deco


def get_correction(name: str) -> CorrectionDef:
    """The registered correction `name`; ValueError naming the registered ones otherwise."""
    if name not in REGISTRY:
        raise ValueError(f"unknown correction {name!r}; allowed: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def check_band(band: tuple[float, float], fn: str, *, positive: bool) -> tuple[float, float]:
    lo, hi = float(band[0]), float(band[1])
    if not (0.0 < lo < hi if positive else 0.0 <= lo < hi):
        raise ValueError(
            f"{fn}: band must be (low, high) with 0 {'<' if positive else '<='} low < high, got {band}"
        )
    return lo, hi


def log_ratio(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, fn: str):
    """`(d, m)`: the detached log-ratio `old - rollout`, 0 at padding, and the checked bool mask."""
    m = check_mask(mask, fn)
    check_same_shape(fn, "response_mask", m, old_log_prob=old, rollout_log_prob=rollout)
    check_finite(fn, "old_log_prob", old, m)
    check_finite(fn, "rollout_log_prob", rollout, m)
    d = torch.where(m, old.detach() - rollout.detach(), torch.zeros_like(old))
    return d, m


def rollout_correction(
    kind: str,
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cap: float = 2.0,
    level: str = "token",
    icepop: tuple[float, float] = ICEPOP_BAND,
    mis: tuple[float, float] = MIS_BAND,
    icepop_mask_frac: float = ADAPTIVE_ICEPOP_MASK_FRAC,
    old_logits: torch.Tensor | None = None,
    rollout_logits: torch.Tensor | None = None,
) -> Correction:
    """The correction `kind` (vocabulary `CORRECTIONS`) of one batch, with its metrics: `tis/mean` (mean
    weight over valid tokens, after masking: `icepop` counts its zeroed tokens, `mis` only the tokens of the
    sequences it kept), `tis/clipped` (fraction of those tokens whose weight was truncated at `cap`; not
    `icepop`), `tis/masked` (fraction of valid tokens zeroed or dropped: `icepop`, `mis`) and
    `tis/seq_masked` (fraction of sequences dropped: `mis`), plus each new correction's own. `level`
    applies to `tis` only; the logits are read by a correction that `needs_distributions` only."""
    fn = "rollout_correction"
    if kind not in CORRECTIONS:
        raise ValueError(f"{fn}: unknown correction {kind!r}; allowed: {', '.join(CORRECTIONS)}")
    if level not in TIS_LEVELS:
        raise ValueError(f"{fn}: unknown level {level!r}; allowed: {', '.join(TIS_LEVELS)}")
    m = check_mask(response_mask, fn)
    entry = get_correction(kind)
    if entry.needs_distributions and (old_logits is None or rollout_logits is None):
        raise ValueError(f"{fn}: {kind!r} needs the trainer's and the sampler's logits")
    inputs = CorrectionInputs(old_log_prob, rollout_log_prob, m, old_logits, rollout_logits)
    options = CorrectionOptions(cap, level, tuple(icepop), tuple(mis), float(icepop_mask_frac))
    return entry.fn(inputs, options)
