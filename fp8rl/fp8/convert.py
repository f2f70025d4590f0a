"""Swap a model's `nn.Linear` layers for FP8 / bf16-emulation linears, and switch quantization off.

`convert_to_fp8(model, recipe)` and `convert_to_bf16_emulation(model)` work in place: each `nn.Linear`
whose qualified name has no component in `skip` (embeddings are not linears; `lm_head` stays high
precision by default, as torchao's and TE's FP8 recipes leave the output head alone) is replaced by a
layer sharing its Parameters, so optimizers, state dicts and Hugging Face checkpoints see the same
tensors under the same names. `quantization_disabled(model)` makes every converted layer compute exactly
`F.linear(x, weight, bias)` inside the block: the BF16 shadow pass of calibrated clipping (docs/architecture.md#calibrated-clipping).
The FP8 layers of one `convert_to_fp8` call share one `FP8Runtime` (fp8rl.fp8.runtime): the caller's, or
a fresh one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from torch import nn

from fp8rl.fp8.linear import BF16Linear, FP8Linear, QuantizedLinearBase
from fp8rl.fp8.recipe import Recipe
from fp8rl.fp8.runtime import FP8Runtime

DEFAULT_SKIP = ("embed_tokens", "lm_head")


def _skipped(name: str, skip: Iterable[str]) -> bool:
    parts = name.split(".")
    return any(s == name or s in parts for s in skip)


def swap_linears(model: nn.Module, make, skip: Iterable[str]) -> nn.Module:
    """Replace every `nn.Linear` of `model` whose qualified name has no component in `skip` by
    `make(linear)`, in place; returns `model` (a bare `nn.Linear` is returned as `make(model)`)."""
    skip = tuple(skip)
    if isinstance(model, nn.Linear):
        return make(model)
    targets = [
        (name, mod)
        for name, mod in model.named_modules()
        if name and isinstance(mod, nn.Linear) and not _skipped(name, skip)
    ]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, make(mod))
    return model


def convert_to_fp8(
    model: nn.Module,
    recipe: Recipe,
    skip: Iterable[str] = DEFAULT_SKIP,
    *,
    backend: str | None = None,
    runtime: FP8Runtime | None = None,
) -> nn.Module:
    """Replace the linears of `model` (not those in `skip`) by `FP8Linear`s running `recipe`, all sharing
    `runtime` (default: a fresh `FP8Runtime.from_env()`); returns `model` (a bare `nn.Linear` is returned
    converted). Already converted layers are re-converted."""
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe: expected a Recipe (fp8rl.fp8.get_recipe), got {type(recipe).__name__}")
    rt = runtime if runtime is not None else FP8Runtime.from_env()
    return swap_linears(
        model, lambda lin: FP8Linear.from_linear(lin, recipe, backend=backend, runtime=rt), skip
    )


def convert_to_bf16_emulation(model: nn.Module, skip: Iterable[str] = DEFAULT_SKIP) -> nn.Module:
    """Replace the linears of `model` (not those in `skip`) by bf16-emulation `BF16Linear`s."""
    return swap_linears(model, BF16Linear.from_linear, skip)


def quantized_linears(model: nn.Module) -> Iterator[tuple[str, QuantizedLinearBase]]:
    """(name, layer) for every converted linear in `model`."""
    for name, mod in model.named_modules():
        if isinstance(mod, QuantizedLinearBase):
            yield name, mod


@contextmanager
def quantization_disabled(model: nn.Module, *, as_bf16: bool = False) -> Iterator[nn.Module]:
    """Inside the block every converted linear of `model` computes the plain `F.linear` (bit-identical
    to the unconverted model) or, with `as_bf16`, the bf16-emulated GEMM of `BF16Linear` (bit-identical
    to the model converted for the bf16 variant), and records no amax; the previous state is restored
    on exit."""
    layers = [m for _, m in quantized_linears(model)]
    before = [(m.quant_enabled, m.disabled_as_bf16) for m in layers]
    for m in layers:
        m.quant_enabled, m.disabled_as_bf16 = False, as_bf16
    try:
        yield model
    finally:
        for m, (enabled, as_bf16_before) in zip(layers, before, strict=True):
            m.quant_enabled, m.disabled_as_bf16 = enabled, as_bf16_before


def fp8_state_dict(model: nn.Module) -> dict[str, dict]:
    """Delayed-scaling amax histories of `model`'s FP8 linears, for checkpoints (kept out of the
    model's state dict so Hugging Face checkpoints stay plain)."""
    return {
        f"{name}.{role}": hist.state_dict()
        for name, mod in quantized_linears(model)
        if isinstance(mod, FP8Linear)
        for role, hist in mod.amax_histories.items()
    }


def load_fp8_state_dict(model: nn.Module, state: dict[str, dict]) -> None:
    """Restore what `fp8_state_dict` saved; a key that names no layer/role raises ValueError."""
    hists = {
        f"{name}.{role}": hist
        for name, mod in quantized_linears(model)
        if isinstance(mod, FP8Linear)
        for role, hist in mod.amax_histories.items()
    }
    unknown = sorted(set(state) - set(hists))
    if unknown:
        raise ValueError(f"fp8 state: no delayed-scaling history named {', '.join(unknown[:5])}")
    for key, value in state.items():
        hists[key].load_state_dict(value)
