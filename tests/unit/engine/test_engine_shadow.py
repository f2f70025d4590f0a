"""ShadowPass: the BF16 reference ratios of a random subset of the step's rows, scored with the FP8
policy's quantization off and its GEMMs bf16-emulated exactly as the bf16 variant computes them."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from fp8rl.config import ArchConfig
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.engine.model import build_model
from fp8rl.engine.phase_timer import PhaseTimer
from fp8rl.engine.precision import setup_precision
from fp8rl.engine.sampler import generate
from fp8rl.engine.scoring import score
from fp8rl.engine.shadow import ShadowPass
from fp8rl.engine.tokenizer import build_char_tokenizer

ROOT = Path(__file__).resolve().parents[3]
ARCH = ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _setup():
    cfg = load_config(ROOT / "config/smoke.yaml")
    tok = build_char_tokenizer()
    base = build_model(ARCH, tok, seed=0)
    twin = copy.deepcopy(base)  # the same weights, converted as the bf16 variant converts them
    prec = setup_precision(base, cfg, RunSpec("grpo", "tiny", "fp8", "tensorwise", 0))
    bf16 = setup_precision(twin, cfg, RunSpec("grpo", "tiny", "bf16", "none", 0)).policy
    prompts = [
        tok(p, add_special_tokens=False)["input_ids"] for p in ["12+34=", "5+67=", "8+9=", "40+2="]
    ] * 2
    batch = generate(prec.policy, prompts, max_new_tokens=4, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                     generator=torch.Generator().manual_seed(0))  # fmt: skip
    return prec, bf16, batch


def _nudge(*models):
    with torch.no_grad():
        for m in models:
            for p in m.parameters():
                p.add_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape)))


def test_shadow_ratios_are_the_bf16_variants_ratios_on_the_shadow_rows():
    prec, bf16, batch = _setup()
    timer = PhaseTimer(torch.device("cpu"))
    shadow = ShadowPass(prec.policy, prec.as_bf16, timer, sample_frac=0.5, temperature=1.0)
    old_bf16, _ = score(bf16, batch, temperature=1.0)
    shadow.start_step(batch, torch.Generator().manual_seed(1), single_update=False)
    rows = (shadow.pos >= 0).nonzero().squeeze(-1)
    assert len(rows) == 4  # half of the 8 rows
    idx = torch.arange(len(batch.response_mask))
    mask, adv = batch.response_mask, torch.tensor([1.0, -1.0] * 4)
    fp8_ratio = torch.full_like(mask, 0.9)

    # The step's first update: the policy has not moved, no pass runs, the reference ratio is 1.
    before = timer.pop("calib")
    ref, ref_mask = shadow.ref_ratios(idx, batch, fp8_ratio, adv, mask, first_update=True)
    assert torch.equal(ref, torch.ones_like(mask)) and timer.pop("calib") is None and before is not None
    assert torch.equal(ref_mask[rows], mask[rows]) and not bool(ref_mask[~(shadow.pos >= 0)].any())

    _nudge(prec.policy, bf16)  # one "update", applied to both twins
    new_bf16, _ = score(bf16, batch, temperature=1.0)
    ref, ref_mask = shadow.ref_ratios(idx, batch, fp8_ratio, adv, mask, first_update=False)
    want = torch.exp(new_bf16 - old_bf16) * mask + (1 - mask)
    # the bf16 variant's ratios, up to the fp32 summation order: the shadow pass scores half the rows, and
    # no CPU GEMM kernel (MKL's or OpenBLAS's) gives a row the same bits whatever the number of rows
    torch.testing.assert_close(ref[rows], want[rows], rtol=1e-5, atol=1e-6)
    others = shadow.pos < 0
    assert torch.equal(ref[others], torch.ones_like(ref[others]))
    assert not bool((ref[rows][mask[rows] > 0] == 1).all())  # the policy moved: ratios are not 1
    # the FP8 path is back on after the pass, and the histogram counted the shadow tokens
    fp8_lp, _ = score(prec.policy, batch, temperature=1.0)
    assert not torch.equal(fp8_lp, new_bf16)
    assert shadow.hist.as_dict()["tokens"] == int(mask[rows].sum())
