"""Where the reference trainer computes: device resolution, its errors, and the GEMM path per device."""

from __future__ import annotations

import pytest
import torch

from fp8rl.engine.device import generator_on, module_device, resolve_device
from fp8rl.fp8 import FP8Linear, gemm_backend, get_recipe, is_fp8_hardware


def test_device_follows_the_flag_then_the_configs_gpus():
    assert resolve_device(None, 0) == torch.device("cpu")
    assert resolve_device("cpu", 8) == torch.device("cpu")  # the flag wins over resources
    if torch.cuda.is_available():
        assert resolve_device(None, 1).type == "cuda"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_without_a_cuda_device_names_the_setting():
    with pytest.raises(ValueError, match=r"resources.train.gpus is 2: .* no CUDA device is visible"):
        resolve_device(None, 2)
    with pytest.raises(ValueError, match=r"--device cuda: .* --device cpu"):
        resolve_device("cuda", 0)


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="device: unknown 'tpu'; allowed: cpu, cuda"):
        resolve_device("tpu")


def test_a_generator_on_the_right_device_is_used_as_it_is():
    g = torch.Generator().manual_seed(3)
    assert generator_on(g, torch.device("cpu")) is g
    assert generator_on(None, torch.device("cpu")) is None
    assert module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")


def test_cpu_layers_emulate_even_beside_an_fp8_gpu(monkeypatch):
    """On a machine with an H100 a model left on the CPU must not take the CUDA GEMM path (nor report
    FP8 hardware); a model on the GPU does."""
    monkeypatch.delenv("FP8RL_FP8_BACKEND", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert gemm_backend("cpu") == "emulated" and not is_fp8_hardware("cpu")
    assert gemm_backend("cuda") == "scaled_mm" and is_fp8_hardware("cuda")
    layer = FP8Linear.from_linear(torch.nn.Linear(16, 16), get_recipe("tensorwise"))
    assert layer.backend == "emulated"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # A100: no FP8
    assert gemm_backend("cuda") == "emulated"
