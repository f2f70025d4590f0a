"""What ends a run as `diverged` from inside a step: a non-finite value where the step needs finite ones.

`Diverged` is raised where a NaN/inf is found (the sampler's log-probabilities, the trainer's
log-probs, loss, gradient norm, or the weights after an optimizer step) and caught by the trainer's
loop, which records it as the run's `non_finite` divergence (fp8rl.rl.stability) and keeps a loadable
checkpoint. Checks only read the tensors: they change no value a run computes.
"""

from __future__ import annotations

import torch


class Diverged(Exception):
    """The run became unstable; the message is summary.json's `reason`."""


def require_finite_weights(model: torch.nn.Module, when: str) -> None:
    """`Diverged` naming the first parameter of `model` with a NaN or ±inf element (`when`: e.g. "after
    the optimizer step")."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            raise Diverged(f"non-finite weights ({name}) {when}")
