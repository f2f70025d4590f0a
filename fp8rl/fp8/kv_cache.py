"""FP8 KV cache for the rollout policy: keys and values are quantized as they enter the cache.

`KVCacheQuantizer` fake-quantizes a `[batch, heads, tokens, head_dim]` key or value tensor: e4m3 with one
scale per token and head (`rowwise` over head_dim: vLLM's dynamic per-token-head KV scales) or one per
tensor (`tensorwise`). `FP8DynamicCache` is a `transformers.DynamicCache` whose `update` stores (and
returns to attention) the quantized states, as an FP8 KV cache does: attention reads keys and values
back from the cache. Values are kept dequantized in the cache's dtype (emulation, docs/architecture.md#emulation-on-cpu), so
memory is not saved, only the numerics reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from fp8rl.fp8.formats import get_format
from fp8rl.fp8.quantize import fake_quantize_tiled
from fp8rl.fp8.tiling import Tiling

KV_GRANULARITIES = ("rowwise", "tensorwise")


@dataclass(frozen=True)
class KVCacheQuantizer:
    """Fake-quantizes keys/values to `fmt` with one scale per token-head (`rowwise`) or per tensor."""

    fmt: str = "e4m3"
    granularity: str = "rowwise"
    noise_scale: float = 1.0  # the FP8 noise dose (fp8rl.fp8.quantize.amplify_error)
    tiling: Tiling = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        get_format(self.fmt)
        if self.granularity not in KV_GRANULARITIES:
            raise ValueError(
                f"granularity: unknown KV-cache granularity {self.granularity!r}; "
                f"allowed: {', '.join(KV_GRANULARITIES)}"
            )
        object.__setattr__(self, "tiling", Tiling(self.granularity))

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        return fake_quantize_tiled(states, self.fmt, self.tiling, noise_scale=self.noise_scale)


class FP8DynamicCache(DynamicCache):
    """A `DynamicCache` that quantizes every key/value state it stores with `kv_quantizer`."""

    kv_quantizer: KVCacheQuantizer = KVCacheQuantizer()

    def __init__(self, *args, kv_quantizer: KVCacheQuantizer | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kv_quantizer = kv_quantizer or KVCacheQuantizer()

    @classmethod
    def adopt(cls, cache: DynamicCache, kv_quantizer: KVCacheQuantizer) -> FP8DynamicCache:
        """Turn an existing (e.g. `generate()`-made) `DynamicCache` into an FP8 one, in place. States
        already in it stay as they are; later updates are quantized."""
        cache.__class__ = cls
        cache.kv_quantizer = kv_quantizer
        return cache  # type: ignore[return-value]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):  # type: ignore[override]
        q = self.kv_quantizer
        return super().update(q(key_states), q(value_states), layer_idx, *args, **kwargs)
