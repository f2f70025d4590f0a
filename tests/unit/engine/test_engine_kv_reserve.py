"""The reserved KV cache (fp8rl.engine.kv_reserve): the sampler's tokens and log-probs are the same, bit for
bit, whether the cache is written in place or grown by concatenation — for the bf16-emulated rollout,
the FP8 rollout and the FP8 rollout with an FP8 KV cache, with repeated prompts (the cache's rows are
selected after the prefill) and responses that end at different lengths."""

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from fp8rl.config import ArchConfig
from fp8rl.engine.kv_reserve import ReservedLayer, reserve
from fp8rl.engine.model import build_model
from fp8rl.engine.sampler import generate
from fp8rl.engine.tokenizer import build_char_tokenizer
from fp8rl.fp8.recipe import get_recipe
from fp8rl.fp8.rollout_copy import make_rollout_policy

ARCH = ArchConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tok_model():
    tok = build_char_tokenizer()
    return tok, build_model(ARCH, tok, seed=0).eval()


def _rollout(kind, model):
    if kind == "bf16":
        return make_rollout_policy(model, None)
    return make_rollout_policy(model, get_recipe("tensorwise"), kv_cache_fp8=(kind == "fp8_kv"))


@pytest.mark.parametrize("kind", ["bf16", "fp8", "fp8_kv"])
def test_reserved_cache_gives_the_same_bits(tok_model, kind):
    tok, model = tok_model
    policy = _rollout(kind, model)
    texts = ["1+2=", "12+45=", "123+456=", "tool:9-3="]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(3)]
    stop = tok.convert_tokens_to_ids("5")  # a stop token the untrained model draws now and then
    outs = [
        generate(policy, prompts, max_new_tokens=12, eos_id=stop, pad_id=tok.pad_token_id,
                 temperature=1.3, top_p=0.9, generator=torch.Generator().manual_seed(7), reserve_cache=r)
        for r in (False, True)
    ]  # fmt: skip
    grown, reserved = outs
    assert torch.equal(grown.input_ids, reserved.input_ids)
    assert torch.equal(grown.log_probs, reserved.log_probs)
    assert torch.equal(grown.response_mask, reserved.response_mask)
    # the test means something only if responses differ in length (some end early, some do not)
    assert len(set(grown.response_lengths.tolist())) > 1


def test_reserve_writes_in_place_and_refuses_overflow():
    cache = DynamicCache()
    k = torch.randn(2, 1, 3, 4)
    cache.update(k, k + 1, 0)
    reserve(cache, 5)
    layer = cache.layers[0]
    assert type(layer) is ReservedLayer and layer.key_buffer.shape == (2, 1, 5, 4)
    new = torch.randn(2, 1, 1, 4)
    keys, values = cache.update(new, new + 1, 0)
    assert keys.shape == (2, 1, 4, 4) and keys.data_ptr() == layer.key_buffer.data_ptr()
    assert torch.equal(keys, torch.cat([k, new], dim=-2)) and torch.equal(
        values, torch.cat([k + 1, new + 1], dim=-2)
    )
    assert cache.get_seq_length() == 4
    layer.batch_select_indices(torch.tensor([1, 1]))
    assert torch.equal(layer.keys[0], layer.keys[1]) and torch.equal(
        layer.keys[0], torch.cat([k, new], -2)[1]
    )
    cache.update(new, new, 0)
    with pytest.raises(RuntimeError, match="reserved KV cache full: 6 positions needed, 5 reserved"):
        cache.update(new, new, 0)


def test_reserve_leaves_an_empty_layer_alone():
    cache = DynamicCache()
    reserve(cache, 5)
    assert all(type(layer) is DynamicLayer for layer in cache.layers)
