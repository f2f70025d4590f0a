"""The FP8 noise dose (`fp8.noise_scale` s): every quantized operand becomes x + s * (Q(x) - x)."""

import pytest
import torch

from fp8rl.fp8 import FP8Runtime, KVCacheQuantizer, Tiling, build_adamw, convert_to_fp8, get_recipe
from fp8rl.fp8.quantize import amplify_error, fake_quantize_tiled


def _x(seed=0, shape=(8, 64)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise", "block1d", "mx"])
def test_dose_scales_the_quantization_error_and_one_is_plain_fp8(granularity):
    x, tiling = _x(), Tiling(granularity)
    q = fake_quantize_tiled(x, "e4m3", tiling)
    assert torch.equal(fake_quantize_tiled(x, "e4m3", tiling, noise_scale=1.0), q)  # bit for bit
    for s in (2.0, 4.0, 0.5):
        noisy = fake_quantize_tiled(x, "e4m3", tiling, noise_scale=s)
        torch.testing.assert_close(noisy - x, s * (q - x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="noise_scale"):
        amplify_error(x, q, 0.0)


def test_fp8_linear_with_a_dose_is_emulated_and_noisier():
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
    ref = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
    ref.load_state_dict(base.state_dict())
    x = _x(1, (16, 64)).requires_grad_()
    exact = ref(x)
    outs = {}
    for s in (1.0, 4.0):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False))
        model.load_state_dict(base.state_dict())
        rt = FP8Runtime(noise_scale=s)
        convert_to_fp8(model, get_recipe("tensorwise", "e4m3"), skip=(), runtime=rt)
        assert model[0].gemm_paths[0] == "emulated"
        outs[s] = model(x)
        outs[s].sum().backward()
        assert rt.gemms.counts()["emulated"] == 3  # forward, input grad, weight grad
    err = {s: float((o - exact).pow(2).mean()) for s, o in outs.items()}
    assert err[4.0] > 4 * err[1.0]  # error variance grows ~ s^2


def test_kv_cache_and_optimizer_take_the_dose():
    x = _x(2, (1, 2, 5, 16))
    plain, noisy = KVCacheQuantizer()(x), KVCacheQuantizer(noise_scale=3.0)(x)
    torch.testing.assert_close(noisy - x, 3.0 * (plain - x), rtol=1e-5, atol=1e-6)

    p1, p2 = torch.nn.Parameter(_x(3, (4, 64))), torch.nn.Parameter(_x(3, (4, 64)))
    opt1 = build_adamw([p1], lr=1e-2, fp8_state=True, impl="blockwise")
    opt2 = build_adamw([p2], lr=1e-2, fp8_state=True, impl="blockwise", noise_scale=8.0)
    for _ in range(3):
        for p, opt in ((p1, opt1), (p2, opt2)):
            p.grad = torch.sin(p.detach() * 7)
            opt.step()
    assert opt1.state[p1]["exp_avg"].dtype == torch.float8_e4m3fn
    assert opt2.state[p2]["exp_avg"].dtype == torch.float32 and bool(
        (opt2.state[p2]["exp_avg_sq"] >= 0).all()
    )
    assert not torch.equal(p1, p2)
    state = opt2.state_dict()
    opt3 = build_adamw([torch.nn.Parameter(p2.detach().clone())], lr=1e-2, fp8_state=True, impl="blockwise",
                       noise_scale=8.0)  # fmt: skip
    opt3.load_state_dict(state)
    assert opt3.state[opt3.param_groups[0]["params"][0]]["exp_avg"].dtype == torch.float32
    with pytest.raises(ValueError, match="blockwise"):
        build_adamw([p1], lr=1e-2, fp8_state=True, impl="torchao", noise_scale=2.0)
