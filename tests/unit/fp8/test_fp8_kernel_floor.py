"""The kernel floor (fp8rl.fp8.kernel_floor) and the bf16 rollout copy that computes with it: another bf16
kernel's rounding, deterministic, a fraction of outputs one ulp off at a scale of at most 1."""

from __future__ import annotations

import pytest
import torch

from fp8rl.fp8 import get_recipe
from fp8rl.fp8.formats import round_to_bf16
from fp8rl.fp8.kernel_floor import bf16_ulp, kernel_floor
from fp8rl.fp8.rollout_copy import RolloutLinear, make_rollout_policy


def _y(n: int = 4096, seed: int = 0) -> torch.Tensor:
    return torch.randn(8, n, generator=torch.Generator().manual_seed(seed)) * 3


def test_bf16_ulp_is_the_spacing_of_bf16_values():
    y = torch.tensor([1.0, 1.5, 2.0, -3.0, 0.375, 0.0, 1e-20, 1e-39])
    assert bf16_ulp(y).tolist() == [2**-7, 2**-7, 2**-6, 2**-6, 2**-9, 0.0, 2.0 ** (-67 - 7), 0.0]
    x = _y()
    nxt = (x.to(torch.bfloat16).view(torch.int16) + 1).view(torch.bfloat16).float()
    b = round_to_bf16(x)
    assert torch.equal((nxt - b).abs(), bf16_ulp(b))  # one step of bf16 at the rounded value


def test_scale_zero_is_the_identity_and_negative_is_refused():
    y = _y()
    assert kernel_floor(y, 0.0) is y
    with pytest.raises(ValueError, match="scale"):
        kernel_floor(y, -1.0)


def test_deterministic_zero_mean_and_bounded_by_half_the_scale():
    y = _y()
    a, b = kernel_floor(y, 4.0, salt=3), kernel_floor(y.clone(), 4.0, salt=3)
    assert torch.equal(a, b)  # a function of the values: a fixed kernel, no random state
    assert not torch.equal(a, kernel_floor(y, 4.0, salt=4))  # another layer draws otherwise
    assert torch.equal(kernel_floor(y, 4.0, salt=2**40 + 3), kernel_floor(y, 4.0, salt=2**40 + 3))
    u = (a - y) / (4.0 * bf16_ulp(y))
    assert u.min() >= -0.5 and u.max() < 0.5
    assert abs(float(u.mean())) < 0.01 and float(u.std()) == pytest.approx(12**-0.5, rel=0.03)  # uniform
    zeros = torch.zeros(2, 16)
    assert torch.equal(kernel_floor(zeros, 4.0), zeros)


@pytest.mark.parametrize("scale", [0.25, 1.0])
def test_at_most_one_ulp_off_in_a_fraction_like_another_summation_order(scale):
    """At a scale of at most 1 an output rounds to its bf16 neighbour or not at all, the flipped share
    about scale / 4 of the outputs (those within scale/2 ulp of a rounding boundary, half of them moved
    towards it)."""
    y = _y()
    plain, floored = (
        round_to_bf16(v).to(torch.bfloat16).view(torch.int16) for v in (y, kernel_floor(y, scale))
    )
    steps = (floored.int() - plain.int()).abs()  # bf16 values apart (same sign: the int16 order)
    assert set(steps.unique().tolist()) <= {0, 1}
    assert float((steps > 0).float().mean()) == pytest.approx(scale / 4, rel=0.1)


def test_bf16_rollout_copy_with_a_floor_differs_from_the_trainers_kernels(tiny_llama):
    ids = torch.randint(0, 40, (3, 10), generator=torch.Generator().manual_seed(7))
    exact, floored = make_rollout_policy(tiny_llama, None), make_rollout_policy(tiny_llama, None, floor=16.0)
    layers = [m for m in floored.modules() if isinstance(m, RolloutLinear)]
    assert {m.floor for m in layers} == {16.0} and len({m.floor_salt for m in layers}) == len(layers)
    assert all(m.floor == 0.0 for m in exact.modules() if isinstance(m, RolloutLinear))
    with torch.no_grad():
        a, b, c = exact(ids).logits, floored(ids).logits, floored(ids).logits
    assert torch.equal(b, c)  # deterministic
    assert 0 < (a - b).abs().max() < 0.5  # another kernel, the same policy
    with torch.no_grad():  # the floor stays through a refresh from the trainer
        tiny_llama.model.layers[0].mlp.up_proj.weight.mul_(1.5)
    floored.refresh_from(tiny_llama)
    assert {m.floor for m in floored.modules() if isinstance(m, RolloutLinear)} == {16.0}


def test_floor_is_a_bf16_rollouts_only(tiny_llama):
    with pytest.raises(ValueError, match="floor"):
        make_rollout_policy(tiny_llama, get_recipe("tensorwise"), floor=1.0)
    with pytest.raises(ValueError, match="floor"):
        make_rollout_policy(tiny_llama, None, floor=-1.0)
