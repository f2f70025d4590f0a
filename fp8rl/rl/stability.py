"""Divergence detection: an entropy spike relative to early training, or a non-finite entropy.

The paper's failure mode shows as policy entropy climbing far above its early level while outputs turn to
gibberish. `EntropySpikeDetector` takes the median entropy of the first `baseline_steps` steps as the
baseline and reports divergence once entropy exceeds `k` x baseline for `m` consecutive steps (config
`stability.entropy_spike_k`, `entropy_spike_m`, `baseline_steps`).
"""

from __future__ import annotations

import math
import statistics
from typing import Any


class EntropySpikeDetector:
    """Feed one entropy value per optimizer step; `update` returns the `diverged` reason or None.

    A NaN/inf entropy is reported at once. The reason is sticky: once diverged, every later call returns
    it. A step not greater than the last one seen is ignored (a resumed run may replay a step), so the
    detector's state, saved with `state_dict`, resumes exactly.
    """

    def __init__(self, k: float, m: int, baseline_steps: int) -> None:
        if not k > 1.0:
            raise ValueError(f"EntropySpikeDetector: k must be > 1, got {k}")
        if m < 1 or baseline_steps < 1:
            raise ValueError(
                f"EntropySpikeDetector: m and baseline_steps must be >= 1, got {m}, {baseline_steps}"
            )
        self.k, self.m, self.baseline_steps = float(k), int(m), int(baseline_steps)
        self.history: list[float] = []
        self.baseline: float | None = None
        self.streak = 0
        self.streak_start: int | None = None
        self.last_step: int | None = None
        self.reason: str | None = None

    @classmethod
    def from_config(cls, stability: Any) -> EntropySpikeDetector:
        """From a `StabilityConfig` of fp8rl.config."""
        return cls(stability.entropy_spike_k, stability.entropy_spike_m, stability.baseline_steps)

    def update(self, step: int, entropy: float) -> str | None:
        if self.reason is not None or (self.last_step is not None and step <= self.last_step):
            return self.reason
        self.last_step = step
        entropy = float(entropy)
        if not math.isfinite(entropy):
            self.reason = f"non-finite entropy ({entropy}) at step {step}"
            return self.reason
        if self.baseline is None:
            self.history.append(entropy)
            if len(self.history) >= self.baseline_steps:
                self.baseline = statistics.median(self.history)
            return None
        threshold = self.k * self.baseline
        if entropy > threshold:
            if self.streak == 0:
                self.streak_start = step
            self.streak += 1
        else:
            self.streak, self.streak_start = 0, None
        if self.streak >= self.m:
            self.reason = (
                f"entropy spike: entropy above {self.k:g} x baseline {self.baseline:.4g} (= {threshold:.4g}) "
                f"for {self.streak} consecutive steps, steps {self.streak_start}-{step} (last {entropy:.4g})"
            )
        return self.reason

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": list(self.history),
            "baseline": self.baseline,
            "streak": self.streak,
            "streak_start": self.streak_start,
            "last_step": self.last_step,
            "reason": self.reason,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"history", "baseline", "streak", "streak_start", "last_step", "reason"} - set(state)
        if missing:
            raise ValueError(f"EntropySpikeDetector.load_state_dict: missing keys {sorted(missing)}")
        self.history = [float(x) for x in state["history"]]
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.streak = int(state["streak"])
        self.streak_start = state["streak_start"]
        self.last_step = state["last_step"]
        self.reason = state["reason"]
