"""What the verl backend reads from a model's entry: its size and how its training and rollout split over
the GPUs, and the `AdapterError` with which the backend refuses what it cannot run.

`params_billions` reads `models.NAME.params` ("8B" -> 8.0); `parallelism` derives Megatron's tensor and
pipeline parallel sizes and vLLM's tensor parallel size from it. Both the overrides
(fp8rl.adapters.verl_overrides) and the job sizing (fp8rl.adapters.verl_sizing) take them from here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from fp8rl.config import ModelConfig


class AdapterError(ValueError):
    """A config or run the verl backend cannot execute; the message names the key to change, `key` is
    its path in the config (for `verl_problems`), None when the message names no single key."""

    def __init__(self, message: str, key: tuple | None = None):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Parallelism:
    """Megatron tensor/pipeline parallel sizes of the trainer and vLLM's tensor parallel size."""

    tp: int
    pp: int
    rollout_tp: int


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1.0))))


def params_billions(model: ModelConfig) -> float:
    """`params: "8B"` -> 8.0; AdapterError when the size is missing or not of the form <number>B/M."""
    m = re.fullmatch(r"\s*~?([0-9.]+)\s*([BbMm])\s*", model.params or "")
    if not m:
        raise AdapterError(f"models.{model.name}.params: need a size like '8B' for the verl backend")
    value = float(m.group(1))
    return value if m.group(2) in "Bb" else value / 1000.0


def parallelism(model: ModelConfig) -> Parallelism:
    """Megatron TP: the smallest power of two >= params/4B (8B -> 2, 14B -> 4, 32B -> 8), at most a node;
    PP: the rest of what one node cannot hold; vLLM TP: the smallest power of two >= params/8B."""
    if model.gpus_per_node < 1:
        raise AdapterError(f"models.{model.name}.gpus_per_node: the verl backend needs GPUs (got 0)")
    size = params_billions(model)
    want_tp = _pow2_at_least(size / 4.0)
    tp = min(want_tp, model.gpus_per_node)
    pp = max(1, want_tp // tp)
    rollout_tp = min(_pow2_at_least(size / 8.0), model.gpus_per_node)
    if (model.nodes * model.gpus_per_node) % (tp * pp):
        raise AdapterError(
            f"models.{model.name}: {model.nodes}x{model.gpus_per_node} GPUs are not divisible by "
            f"TP {tp} x PP {pp}"
        )
    return Parallelism(tp=tp, pp=pp, rollout_tp=rollout_tp)
