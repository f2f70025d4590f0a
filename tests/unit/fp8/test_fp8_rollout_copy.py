"""Rollout copy: FP8 weights per recipe, refresh from the trainer, FP8 KV cache through generate()."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from fp8rl.fp8 import convert_to_fp8, fake_quantize, get_recipe, quantization_disabled
from fp8rl.fp8.kv_cache import FP8DynamicCache, KVCacheQuantizer
from fp8rl.fp8.rollout_copy import RolloutLinear, make_rollout_policy


def _ids(b: int = 3, t: int = 10) -> torch.Tensor:
    return torch.randint(0, 40, (b, t), generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("name", ["tensorwise", "blockwise"])
def test_rollout_weights_are_quantized_per_recipe(tiny_llama, name):
    recipe = get_recipe(name)
    rollout = make_rollout_policy(tiny_llama, recipe)
    assert isinstance(rollout, LlamaForCausalLM) and type(rollout.lm_head) is torch.nn.Linear
    layer = rollout.model.layers[0].mlp.up_proj
    assert isinstance(layer, RolloutLinear)
    spec = recipe.output.b
    expected = fake_quantize(layer.weight, spec.fmt, spec.granularity, block=spec.block)
    assert torch.equal(layer.weight_q, expected)
    assert not any(p.requires_grad for p in rollout.parameters())
    ids = _ids()
    with torch.no_grad():
        a, b = rollout(ids).logits, tiny_llama(ids).logits
    assert 0 < (a - b).abs().max() < 0.5  # quantized, and still the same policy
    with quantization_disabled(rollout), torch.no_grad():
        assert torch.equal(rollout(ids).logits, b)


def test_refresh_from_copies_current_trainer_weights(tiny_llama):
    rollout = make_rollout_policy(tiny_llama, get_recipe("rowwise"))
    convert_to_fp8(tiny_llama, get_recipe("rowwise"))  # the trainer's layers may be converted
    with torch.no_grad():
        tiny_llama.model.layers[1].self_attn.v_proj.weight.mul_(3.0)
    trainer_w = tiny_llama.model.layers[1].self_attn.v_proj.weight
    layer = rollout.model.layers[1].self_attn.v_proj
    assert not torch.equal(layer.weight, trainer_w)
    rollout.refresh_from(tiny_llama)
    assert torch.equal(layer.weight, trainer_w) and layer.weight is not trainer_w
    spec = get_recipe("rowwise").output.b
    assert torch.equal(
        layer.weight_q, fake_quantize(trainer_w, "e4m3", "rowwise", pow2_scales=spec.pow2_scales)
    )


def test_bf16_rollout_rounds_weights(tiny_llama):
    rollout = make_rollout_policy(tiny_llama, None)
    w = rollout.model.layers[0].self_attn.q_proj
    assert torch.equal(w.weight_q, w.weight.to(torch.bfloat16).float())


def test_fp8_kv_cache_through_forward_and_generate(tiny_llama, monkeypatch):
    rollout = make_rollout_policy(tiny_llama, get_recipe("tensorwise"), kv_cache_fp8=True)
    plain = make_rollout_policy(tiny_llama, get_recipe("tensorwise"))
    ids = _ids()
    with torch.no_grad():
        out = rollout(ids, use_cache=True)
        assert isinstance(out.cache, FP8DynamicCache)
        keys = out.cache.layers[0].keys
        assert torch.equal(keys, KVCacheQuantizer()(keys))  # stored on the FP8 grid
        step = rollout(ids[:, -1:], cache=out.cache, use_cache=True).logits
        ref = plain(ids[:, -1:], cache=plain(ids, use_cache=True).cache, use_cache=True).logits
    assert step.shape == (3, 1, 40) and 0 < (step - ref).abs().max() < 0.5
    calls = []
    original = FP8DynamicCache.update

    def spy(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FP8DynamicCache, "update", spy)
    gen = rollout.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                           pad_token_id=0)  # fmt: skip
    assert gen.shape == (3, 13)
    assert len(calls) == 3 * tiny_llama.config.num_hidden_layers  # prefill + 2 decode steps, every layer


def test_bad_arguments(tiny_llama):
    with pytest.raises(ValueError, match="recipe"):
        make_rollout_policy(tiny_llama, "tensorwise")
    with pytest.raises(ValueError, match="granularity"):
        KVCacheQuantizer(granularity="block2d")
