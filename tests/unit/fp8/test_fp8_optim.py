"""FP8-moment AdamW: tracks fp32 AdamW, stores e4m3 moments, round-trips through state_dict."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from fp8rl.fp8.optim import BlockwiseFP8AdamW, build_adamw


def _problem(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 64, generator=g)
    w_true = torch.randn(64, 48, generator=g)
    y = x @ w_true
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 96), nn.Tanh(), nn.Linear(96, 48))
    return model, x, y


def _train(model, opt, x, y, steps):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_blockwise_fp8_adamw_tracks_fp32_adamw():
    m32, x, y = _problem()
    m8, _, _ = _problem()
    opt32 = build_adamw(m32.parameters(), lr=1e-2, weight_decay=0.01, fp8_state=False)
    opt8 = build_adamw(m8.parameters(), lr=1e-2, weight_decay=0.01, fp8_state=True, impl="blockwise")
    assert isinstance(opt8, BlockwiseFP8AdamW)
    _train(m32, opt32, x, y, 5)
    _train(m8, opt8, x, y, 5)
    for p8, p32 in zip(m8.parameters(), m32.parameters(), strict=True):  # early: the same trajectory
        assert ((p8 - p32).norm() / p32.norm()).item() < 0.02
    l32 = _train(m32, opt32, x, y, 20)
    l8 = _train(m8, opt8, x, y, 20)
    assert l8[-1] < 0.5 * l8[0]  # it trains, and as well as fp32 moments
    assert abs(l8[-1] - l32[-1]) < 0.1 * l32[-1]
    state = opt8.state[m8[0].weight]
    assert state["exp_avg"].dtype == torch.float8_e4m3fn and state["exp_avg_sq"].dtype == torch.float8_e4m3fn
    assert state["exp_avg"].numel() * 1 + state["exp_avg_scale"].numel() * 4 < m8[0].weight.numel() * 4 / 3


def test_small_second_moments_do_not_blow_up():
    """A tile whose gradients span 1e4: v spans 1e8, beyond e4m3's ~2^17. Stored as v, the small ones
    flush to zero each step and those coordinates move ~9x too far in 200 steps; stored as sqrt(v) the
    trajectory is fp32 AdamW's."""
    grad = torch.full((128,), 1e-4)
    grad[0] = 1.0
    params = []
    for cls in (BlockwiseFP8AdamW, torch.optim.AdamW):
        p = nn.Parameter(torch.zeros(128))
        opt = cls([p], lr=1e-3, weight_decay=0.0)
        for _ in range(200):
            p.grad = grad.clone()
            opt.step()
        params.append(p.detach())
    torch.testing.assert_close(params[0], params[1], rtol=0.02, atol=1e-4)


def test_state_dict_round_trip_continues_identically():
    model, x, y = _problem(1)
    opt = build_adamw(model.parameters(), lr=1e-2, fp8_state=True, impl="blockwise")
    _train(model, opt, x, y, 3)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)
    model2, _, _ = _problem(1)
    model2.load_state_dict(saved["model"])
    opt2 = build_adamw(model2.parameters(), lr=1e-2, fp8_state=True, impl="blockwise")
    opt2.load_state_dict(saved["opt"])
    assert opt2.state[model2[0].weight]["exp_avg"].dtype == torch.float8_e4m3fn
    _train(model, opt, x, y, 2)
    _train(model2, opt2, x, y, 2)
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bad_impl_is_named():
    with pytest.raises(ValueError, match="impl"):
        build_adamw([nn.Parameter(torch.zeros(4))], lr=1e-3, fp8_state=True, impl="apex")


def test_torchao_adamw_fp8_runs_and_round_trips():
    pytest.importorskip("torchao.optim")
    torch.manual_seed(0)
    lin = nn.Linear(64, 64, bias=False)  # 4096 values: torchao's smallest FP8-state tensor
    opt = build_adamw(lin.parameters(), lr=1e-2, fp8_state=True, impl="torchao")
    x = torch.randn(32, 64)
    for _ in range(2):
        opt.zero_grad()
        lin(x).pow(2).mean().backward()
        opt.step()
    assert type(opt.state[lin.weight]["exp_avg"]).__name__ == "OptimStateFp8"
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    opt2 = build_adamw(lin.parameters(), lr=1e-2, fp8_state=True, impl="torchao")
    opt2.load_state_dict(torch.load(buf, weights_only=False))
    assert type(opt2.state[lin.weight]["exp_avg"]).__name__ == "OptimStateFp8"
