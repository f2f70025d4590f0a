"""A KV cache whose storage is reserved once: each decoded token is written in place, not concatenated.

`transformers`' `DynamicCache` grows every layer's keys and values with `torch.cat` at every new token,
so a response of T tokens copies the whole cache T times per layer: at a long-answer shape (4 layers, 64
rows, 48 new tokens) those copies were 28 % of the sampler's time, more than its matrix products
(`benchmarks/sampler_cache.py`). `reserve(cache, length)` turns each layer of a filled `DynamicCache`
(after the prefill) into a `ReservedLayer`: its keys and values move into buffers of `length` positions,
and `update` writes the new states into the next free positions and returns views of the filled part.

Attention therefore sees exactly the tensors it saw before — the same values, the same shape (the
filled length, not the reserved one), only with the buffer's strides — so the sampled tokens and
log-probs are the same bit for bit (tests/unit/engine/test_engine_kv_reserve.py compares both caches on the
bf16, FP8 and FP8-KV-cache rollouts of both numerics modes). The cache classes on top (`FP8DynamicCache`
quantizes states before they reach the layers) are unchanged.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys/values live in preallocated buffers (`keys`/`values` are views of
    their filled part); made from a filled `DynamicLayer` by `reserve`."""

    key_buffer: torch.Tensor
    value_buffer: torch.Tensor

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > self.key_buffer.shape[-2]:
            raise RuntimeError(
                f"reserved KV cache full: {end} positions needed, {self.key_buffer.shape[-2]} reserved"
            )
        self.key_buffer[..., start:end, :] = key_states
        self.value_buffer[..., start:end, :] = value_states
        self.keys = self.key_buffer[..., :end, :]
        self.values = self.value_buffer[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.key_buffer = self.key_buffer[indices, ...]
        self.value_buffer = self.value_buffer[indices, ...]
        end = self.keys.shape[-2]
        self.keys = self.key_buffer[..., :end, :]
        self.values = self.value_buffer[..., :end, :]


def _reserve_layer(layer: DynamicLayer, length: int) -> None:
    filled = layer.keys.shape[-2]
    if filled > length:
        raise ValueError(f"reserve: the cache already holds {filled} positions, more than {length}")
    for name, states in (("key_buffer", layer.keys), ("value_buffer", layer.values)):
        buf = states.new_empty((*states.shape[:-2], length, states.shape[-1]))
        buf[..., :filled, :] = states
        setattr(layer, name, buf)
    layer.__class__ = ReservedLayer
    layer.keys = layer.key_buffer[..., :filled, :]
    layer.values = layer.value_buffer[..., :filled, :]


def reserve(cache, length: int):
    """Give every initialised layer of `cache` (a filled `DynamicCache`) buffers of `length` positions,
    in place; returns `cache`. Layers of another kind (sliding-window, quantized) are left as they are."""
    for layer in getattr(cache, "layers", ()):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel():
            _reserve_layer(layer, length)
    return cache
