"""Dynamic loss scaling for the fp16 variant (as torch.amp.GradScaler and Megatron do).

The loss is multiplied by `scale` before the backward so that small gradients survive FP16's range;
the gradients are divided by it again before clipping and the optimizer step. A step whose gradients
hold an inf or NaN (the scale overflowed FP16) is skipped and the scale halved; after `growth_interval`
clean steps in a row it doubles. The state is checkpointed with the trainer's, so a resumed run scales
as one that never stopped.
"""

from __future__ import annotations

import math

import torch

INIT_SCALE = 2.0**15  # verl 0.9.1 Megatron fp16 optimizer: initial_loss_scale 32768
GROWTH_INTERVAL = 1000  # Megatron's loss_scale_window


class DynamicLossScaler:
    def __init__(self, init_scale: float = INIT_SCALE, growth_interval: int = GROWTH_INTERVAL) -> None:
        self.scale, self.growth_interval = float(init_scale), int(growth_interval)
        self.good_steps = 0
        self.skipped = 0

    def backward_step(
        self,
        loss: torch.Tensor,
        params: list[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        clip: float,
    ) -> tuple[float, dict[str, float]]:
        """Backward of `loss` × scale, unscale, clip to `clip`, step (or skip on overflow); returns the
        unscaled gradient norm (inf on a skipped step) and `loss_scale/scale`, `loss_scale/skipped`."""
        optimizer.zero_grad(set_to_none=True)
        (loss * self.scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        for g in grads:
            g.div_(self.scale)
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        metrics = {"loss_scale/scale": self.scale}
        if not finite:
            self.scale = max(self.scale / 2.0, 1.0)
            self.good_steps = 0
            self.skipped += 1
            optimizer.zero_grad(set_to_none=True)
            return math.inf, {**metrics, "loss_scale/skipped": 1.0}
        gnorm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        optimizer.step()
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= 2.0
            self.good_steps = 0
        return gnorm, {**metrics, "loss_scale/skipped": 0.0}

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.good_steps = float(state["scale"]), int(state["good_steps"])
        self.skipped = int(state.get("skipped", 0))
