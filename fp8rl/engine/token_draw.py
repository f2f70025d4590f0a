"""How the sampler draws one token per row from a probability vector: `multinomial` or `inverse_cdf`.

Both draw from the same distribution; they consume the random generator differently, so a seed gives
other tokens under each, and which one a run uses is part of its config (`schedule.sampler_draw`).

- `multinomial` (the default; every published tier): `torch.multinomial(probs, 1)`. On the CPU, torch
  draws one sample by drawing one exponential variate per vocabulary entry and row and taking the argmax
  of `p / e` (the exponential race), so its cost grows with the vocabulary: on the longform testbed's
  4096 tokens it is a tenth of the training step.
- `inverse_cdf`: one uniform per row, in fp64, against the row's cumulative sums in fp64: the token is
  the first whose cumulative probability exceeds `u` times the row's total. The fp32 probabilities are
  exact in fp64 and torch's CPU `cumsum` adds them one after the other along the row (the same sums as
  numpy's `add.accumulate`: tested), so the sums, and the token, are the same on every kernel path and
  thread count. A token of probability 0 (a -inf logit, or outside the top-p nucleus) has an empty
  interval and is never drawn; where `u` times the total rounds to the total itself, the draw is the
  last token of positive probability. Each token's probability is its interval's width over the total:
  the row's distribution up to fp64 rounding of the sums (about 1e-16 of the total).

A new draw is one function here registered under its name (`DRAWS`) and one value of the config's
`Literal`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

MULTINOMIAL = "multinomial"
INVERSE_CDF = "inverse_cdf"


def multinomial(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of `probs [B, V]` (non-negative, any positive total) by `torch.multinomial`."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of `probs [B, V]` (non-negative, any positive total) by the inverse of the row's
    cumulative distribution in fp64, one uniform per row (module docstring)."""
    vocab = probs.shape[-1]
    cdf = probs.to(torch.float64).cumsum(-1)
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device, generator=generator)
    # the first token whose cumulative sum exceeds u * total: never one of probability 0 (its sum equals
    # the one before it), unless u * total rounded onto the total and the search ran past the last token
    tok = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=vocab - 1)
    past = probs.gather(-1, tok) == 0
    if bool(past.any()):
        last_positive = vocab - 1 - (probs.flip(-1) > 0).to(torch.uint8).argmax(-1, keepdim=True)
        tok = torch.where(past, last_positive, tok)
    return tok.squeeze(-1)


DRAWS: dict[str, Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]] = {
    MULTINOMIAL: multinomial,
    INVERSE_CDF: inverse_cdf,
}


def draw_tokens(
    probs: torch.Tensor, generator: torch.Generator | None, draw: str = MULTINOMIAL
) -> torch.Tensor:
    """One token per row of `probs [B, V]` by the registered draw `draw`; ValueError naming the known
    draws for another name."""
    try:
        fn = DRAWS[draw]
    except KeyError:
        raise ValueError(f"sampler draw {draw!r}: known draws are {', '.join(DRAWS)}") from None
    return fn(probs, generator)
