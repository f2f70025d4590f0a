"""On an FP8 GPU (compute capability ≥ 8.9): a few steps of the reference trainer with real FP8 GEMMs.

Every trainer-side GEMM of the tensorwise and rowwise recipes runs through `torch._scaled_mm`
(cuBLASLt; odd token counts are zero-padded to its multiples of 16); blockwise stays emulated on the
GPU. The CUDA policy's log-probs must sit within FP8 format error of the CPU emulation's on the
same sequences: the same operands rounded to the same grid, only accumulation order differs.
Skipped without such a GPU.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _fp8_gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9)")


RUNS = [
    ("grpo/tiny/bf16/none/seed0", False),
    ("grpo/tiny/fp8/tensorwise/seed0", True),
    ("grpo/tiny/fp8/rowwise/seed0", True),
    ("grpo/tiny/fp8_calib/tensorwise/seed0", True),
    ("dapo/tiny/fp8_tis_calib/tensorwise/seed1", True),
    ("grpo/tiny/fp8/blockwise/seed0", False),
]


@pytest.mark.parametrize(("run_id", "real_fp8"), RUNS, ids=[r for r, _ in RUNS])
def test_trainer_steps_on_the_gpu(train, tmp_path, restore_torch_globals, run_id, real_fp8):
    from fp8rl.engine.model import load_hf

    trainer, summary, rows = train(run_id, tmp_path / "run", {"schedule.steps": 3}, device="cuda")
    assert summary["status"] == "ok", summary["reason"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(v) for r in rows for v in r.values())
    assert all(p.is_cuda for p in trainer.policy.parameters())
    tp = json.loads((tmp_path / "run" / "throughput.json").read_text())
    assert tp["device"] == torch.cuda.get_device_name() and tp["emulated"] == (not real_fp8)
    if trainer.run_spec.spec.fp8:
        gemms = tp["fp8_gemms"]
        assert (gemms["scaled_mm"] > 0) == real_fp8
        if real_fp8:  # whatever the batch's token count, no GEMM fell back to emulation
            assert gemms["emulated"] == 0, gemms
    load_hf(tmp_path / "run" / "checkpoint")  # the GPU run's checkpoint loads on the CPU


def test_cuda_fp8_log_probs_match_the_cpu_emulation(tier):
    """Same weights, same sequences: tensorwise FP8 with real GEMMs on the GPU vs emulated on the CPU."""
    from fp8rl.engine.model import load_hf
    from fp8rl.engine.sampler import generate
    from fp8rl.engine.scoring import score
    from fp8rl.engine.tokenizer import load_tokenizer
    from fp8rl.fp8 import convert_to_fp8, get_recipe

    root, *_ = tier
    base = root / "base" / "tiny"
    tok = load_tokenizer(base)
    prompts = [tok(f"{a}+{b}=", add_special_tokens=False)["input_ids"] for a in range(4) for b in range(4)]
    fp32 = load_hf(base)
    batch = generate(fp32, prompts, max_new_tokens=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                     greedy=True)  # fmt: skip
    ref, _ = score(fp32, batch, temperature=1.0)
    out = {}
    for device, backend in (("cpu", "emulated"), ("cuda", "scaled_mm")):
        model = load_hf(base).to(device)
        convert_to_fp8(model, get_recipe("tensorwise", "hybrid"), backend=backend)
        with torch.no_grad():
            out[device] = score(model, batch.to(device), temperature=1.0)[0].cpu()
    fp8_err = (out["cpu"] - ref).abs().max()
    assert fp8_err > 0  # FP8 changes the log-probs ...
    assert (out["cuda"] - out["cpu"]).abs().max() <= 0.5 * fp8_err  # ... the same way on both paths
