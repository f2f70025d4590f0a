"""FP8Runtime: GEMM counts and the compile switch belong to the model's owner; GEMM paths are chosen
per layer when it is made or moved, not per call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fp8rl.fp8 import FP8Linear, FP8Runtime, GemmCounter, convert_to_fp8, get_recipe, quantized_linears


def _step(model: nn.Module, batch: int = 4) -> None:
    x = torch.randn(batch, 16, requires_grad=True)
    model(x).sum().backward()


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))


def test_two_models_keep_separate_gemm_counts():
    a, b = _model(), _model()
    ra, rb = FP8Runtime(), FP8Runtime()
    convert_to_fp8(a, get_recipe("tensorwise"), runtime=ra)
    convert_to_fp8(b, get_recipe("blockwise"), runtime=rb)
    assert all(layer.runtime is ra for _, layer in quantized_linears(a))
    _step(a)
    _step(a)
    assert ra.gemms.counts() == {"emulated": 2 * 2 * 3, "scaled_mm": 0}  # 2 steps x 2 layers x 3 GEMMs
    assert rb.gemms.counts() == {"emulated": 0, "scaled_mm": 0}
    _step(b)
    assert rb.gemms.counts()["emulated"] == 2 * 3 and ra.gemms.counts()["emulated"] == 12
    ra.gemms.reset()
    assert ra.gemms.counts() == {"emulated": 0, "scaled_mm": 0} and rb.gemms.counts()["emulated"] == 6


def test_a_model_converted_without_a_runtime_gets_its_own():
    a, b = (
        convert_to_fp8(_model(), get_recipe("tensorwise")),
        convert_to_fp8(_model(), get_recipe("tensorwise")),
    )
    (_, la0), (_, la1) = quantized_linears(a)
    (_, lb0), _ = quantized_linears(b)
    assert la0.runtime is la1.runtime and la0.runtime is not lb0.runtime
    _step(a)
    assert la0.runtime.gemms.counts()["emulated"] == 6 and lb0.runtime.gemms.counts()["emulated"] == 0


def test_scaled_mm_gemms_are_counted_on_their_path():
    rt = FP8Runtime()
    layer = FP8Linear.from_linear(
        nn.Linear(16, 16), get_recipe("tensorwise"), backend="scaled_mm", runtime=rt
    )
    _step(layer)
    assert rt.gemms.counts() == {"emulated": 0, "scaled_mm": 3}


def test_counter_refuses_an_unknown_path():
    with pytest.raises(ValueError, match="path: unknown GEMM path 'te'; allowed: emulated, scaled_mm"):
        GemmCounter().add("te")


def test_compile_switch_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("FP8RL_FP8_COMPILE", raising=False)
    assert FP8Runtime.from_env().compiled is False
    monkeypatch.setenv("FP8RL_FP8_COMPILE", "1")
    assert FP8Runtime.from_env().compiled is True
    assert FP8Runtime().compiled is False  # the switch is the runtime's, not the process's


@pytest.mark.parametrize(
    ("recipe", "fmt", "paths"),
    [
        ("tensorwise", "hybrid", ("scaled_mm", "scaled_mm", "scaled_mm")),
        ("tensorwise", "e5m2", ("emulated", "emulated", "emulated")),  # e5m2 x e5m2: no _scaled_mm
        ("rowwise", "hybrid", ("scaled_mm", "scaled_mm", "scaled_mm")),
        ("blockwise", "hybrid", ("emulated", "emulated", "emulated")),
    ],
)
def test_gemm_paths_are_resolved_when_the_layer_is_made(recipe, fmt, paths):
    layer = FP8Linear.from_linear(nn.Linear(16, 16), get_recipe(recipe, fmt), backend="scaled_mm")
    assert layer.gemm_paths == paths
    assert layer.backend == "scaled_mm"  # as asked; a GEMM _scaled_mm cannot compute is emulated


def test_gemm_paths_follow_a_move_not_each_call(monkeypatch):
    monkeypatch.delenv("FP8RL_FP8_BACKEND", raising=False)
    layer = FP8Linear.from_linear(nn.Linear(16, 16), get_recipe("tensorwise"))
    assert layer.backend == "emulated" and layer.gemm_paths == ("emulated",) * 3  # CPU default
    monkeypatch.setenv("FP8RL_FP8_BACKEND", "scaled_mm")
    _step(layer)
    assert layer.runtime.gemms.counts()["scaled_mm"] == 0  # chosen once: no per-call re-check
    layer.to("cpu")  # a move re-resolves for the (new) device
    assert layer.backend == "scaled_mm" and layer.gemm_paths == ("scaled_mm",) * 3
    _step(layer)
    assert layer.runtime.gemms.counts() == {"emulated": 3, "scaled_mm": 3}
