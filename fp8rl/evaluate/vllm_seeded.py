"""lm-eval's `vllm` model with one sampling seed per request: `fp8rl-vllm`, the paper tier's eval model.

lm-eval 0.4.13 seeds vLLM once per engine (`seed`, 1234) and, with `data_parallel_size` > 1, builds one
engine per replica from the same arguments. An avg@k task sends each prompt k times; the copies are
dealt to the replicas in turn, so replicas that receive the same prompts in the same order draw the
same samples, so an avg@k problem holds fewer than k distinct samples (read from lm-eval's code).

`SeededVLLM` gives every generation request its own `SamplingParams.seed`, derived from the engine seed,
the prompt's tokens and the request's rank among the copies of that prompt in the call
(`request_seeds`). Copies of a prompt then sample independently, and the samples depend neither on the
number of replicas nor on how lm-eval deals the requests out. Greedy requests are unaffected (a seed
changes nothing at temperature 0). Everything else is lm-eval's own model.

`register()` imports lm-eval's vllm module (which imports vllm: GPU machines only) and registers the
subclass; `fp8rl.evaluate.lm_eval_runner.model_spec` calls it for the verl backend.
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from collections.abc import Sequence

MODEL_NAME = "fp8rl-vllm"


def request_seeds(base_seed: int, requests: Sequence[Sequence[int]]) -> list[int]:
    """One seed per request: a hash of (base seed, the prompt's token ids, its rank among the identical
    prompts before it in `requests`), as a 63-bit integer."""
    seen: dict[tuple[int, ...], int] = defaultdict(int)
    out = []
    for tokens in requests:
        key = tuple(int(t) for t in tokens)
        rank = seen[key]
        seen[key] += 1
        blob = f"{base_seed}:{rank}:{','.join(map(str, key))}".encode()
        out.append(int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 1)
    return out


def with_seed(params, seed: int):
    """A copy of vLLM `SamplingParams` with its own `seed`."""
    out = params.clone() if hasattr(params, "clone") else copy.deepcopy(params)
    out.seed = seed
    return out


_REGISTERED: dict[str, type] = {}


def register() -> str:
    """Register `fp8rl-vllm` with lm-eval (once per process); returns the model name to pass it."""
    if MODEL_NAME in _REGISTERED:
        return MODEL_NAME
    from lm_eval.api.registry import register_model
    from lm_eval.models.vllm_causallms import VLLM

    class SeededVLLM(VLLM):
        """lm-eval's vLLM model, every generation request with its own seed (module docstring)."""

        def _model_generate(self, requests, generate=False, sampling_params=None):
            if generate and isinstance(sampling_params, list):
                seeds = request_seeds(int(self.model_args.get("seed", 1234)), requests)
                sampling_params = [with_seed(p, s) for p, s in zip(sampling_params, seeds, strict=True)]
            return super()._model_generate(requests, generate=generate, sampling_params=sampling_params)

    register_model(MODEL_NAME)(SeededVLLM)
    _REGISTERED[MODEL_NAME] = SeededVLLM
    return MODEL_NAME
