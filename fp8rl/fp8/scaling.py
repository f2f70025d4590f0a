"""Delayed scaling: a tensor's scale taken from the amax history of its previous steps.

As Transformer Engine's `DelayedScaling`: each quantization records the tensor's current amax into a
rolling history of `amax_history_len` entries; the scale for the *next* quantization is
`fmt_max / amax_hist / 2^margin` with `amax_hist` the history's max (`amax_compute_algo="max"`) or its
latest entry (`"most_recent"`). Values above the history's range saturate, which is the point of the
recipe. The very first call has no history: it is scaled by its own amax and seeds the history
(torchao's old delayed mode initialised its history from the first amax the same way; TE starts from
scale 1).
"""

from __future__ import annotations

import torch

from fp8rl.fp8.formats import FP8Format, get_format
from fp8rl.fp8.quantize import amax_to_scale


class AmaxHistory:
    """Rolling amax history of one tensor role (e.g. a layer's input) and the delayed scale it gives."""

    def __init__(self, length: int = 16, algo: str = "max", margin: int = 0) -> None:
        if length <= 0:
            raise ValueError(f"amax_history_len: must be positive, got {length}")
        if algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo: unknown {algo!r}; allowed: max, most_recent")
        self.length, self.algo, self.margin = length, algo, margin
        self.history = torch.zeros(length, dtype=torch.float32)
        self.count = 0  # amaxes recorded so far

    def record(self, amax: torch.Tensor) -> None:
        """Push the current amax (a 0-d tensor) into the history."""
        if self.history.device != amax.device:
            self.history = self.history.to(amax.device)
        self.history = torch.roll(self.history, 1)
        self.history[0] = amax.detach().to(torch.float32)
        self.count += 1

    def amax(self) -> torch.Tensor | None:
        """The amax the next scale derives from, or None before anything was recorded."""
        if self.count == 0:
            return None
        if self.algo == "most_recent":
            return self.history[0]
        return self.history[: min(self.count, self.length)].max()

    def scale(self, fmt: str | FP8Format, device: torch.device | None = None) -> torch.Tensor | None:
        """fp32 scale from the history (torchao convention `fmt_max / amax`), or None if it is empty."""
        amax = self.amax()
        if amax is None:
            return None
        s = amax_to_scale(amax, get_format(fmt)) / (2.0**self.margin)
        return s.to(device) if device is not None else s

    def state_dict(self) -> dict:
        return {"history": self.history.clone(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.history = state["history"].clone().to(torch.float32)
        self.count = int(state["count"])
