"""The KV-cached sampler against transformers' own `generate`, and its log-probs against a full forward."""

import pytest
import torch

from fp8rl.config import ArchConfig
from fp8rl.engine.model import build_model
from fp8rl.engine.sampler import RolloutBatch, decode_responses, generate, left_pad
from fp8rl.engine.scoring import score
from fp8rl.engine.tokenizer import build_char_tokenizer

ARCH = ArchConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=48)


@pytest.fixture(scope="module")
def tok_model():
    tok = build_char_tokenizer()
    model = build_model(ARCH, tok, seed=0).eval()
    return tok, model


def _prompts(tok, texts):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_greedy_matches_transformers_generate(tok_model):
    tok, model = tok_model
    texts = ["1+2=", "12+45=", "123+456=", "tool:9-3="]
    ours = generate(
        model,
        _prompts(tok, texts),
        max_new_tokens=8,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        greedy=True,
    )
    enc = tok(texts, return_tensors="pt", padding=True)
    ref = model.generate(
        **enc, max_new_tokens=8, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    ref_resp = ref[:, enc["input_ids"].shape[1] :]
    width = ref_resp.shape[1]
    assert torch.equal(ours.responses[:, :width], ref_resp)
    assert ours.responses.shape[1] == 8


def test_rollout_log_probs_equal_a_full_forward(tok_model):
    tok, model = tok_model
    g = torch.Generator().manual_seed(1)
    batch = generate(model, _prompts(tok, ["1+2=", "12+45=", "7-9="] * 8), max_new_tokens=10, eos_id=tok.eos_token_id,
                     pad_id=tok.pad_token_id, temperature=0.7, generator=g)  # fmt: skip
    with torch.no_grad():
        lp, _ = score(model, batch, temperature=0.7)
    m = batch.response_mask > 0
    assert torch.allclose(lp[m], batch.log_probs[m], atol=1e-5)
    assert torch.all(lp[~m] == 0) and torch.all(batch.log_probs[~m] == 0)


def test_sampling_is_seeded_and_masks_stop_at_eos(tok_model):
    tok, model = tok_model
    prompts = _prompts(tok, ["5+5=", "10+20="] * 32)
    kw = dict(max_new_tokens=20, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, temperature=2.0)
    a = generate(model, prompts, generator=torch.Generator().manual_seed(7), **kw)
    b = generate(model, prompts, generator=torch.Generator().manual_seed(7), **kw)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.log_probs, b.log_probs)
    resp, mask = a.responses, a.response_mask
    ended = 0
    for i in range(len(resp)):
        eos = (resp[i] == tok.eos_token_id).nonzero()
        n = int(mask[i].sum())
        if len(eos):
            ended += 1
            assert n == int(eos[0]) + 1  # the eos is the last masked token
            assert not a.truncated[i]
        else:
            assert n == 20 and a.truncated[i]
        assert torch.all(resp[i, n:] == tok.pad_token_id)
        assert torch.all(mask[i, :n] == 1)
    assert ended > 0
    assert torch.equal(a.attention_mask[:, a.prompt_len :], mask.long())


def test_tiny_top_p_is_greedy(tok_model):
    tok, model = tok_model
    prompts = _prompts(tok, ["1+2=", "33+4="])
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    greedy = generate(model, prompts, greedy=True, **kw)
    nucleus = generate(model, prompts, top_p=1e-6, generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(greedy.responses, nucleus.responses)


def test_select_and_decode(tok_model):
    tok, model = tok_model
    batch = generate(model, _prompts(tok, ["1+2=", "3+4=", "5+6="]), max_new_tokens=4, eos_id=tok.eos_token_id,
                     pad_id=tok.pad_token_id, greedy=True)  # fmt: skip
    sub = batch.select(torch.tensor([2, 0]))
    assert isinstance(sub, RolloutBatch) and torch.equal(sub.input_ids[0], batch.input_ids[2])
    texts = decode_responses(tok, batch)
    assert len(texts) == 3 and all("<" not in t for t in texts)


def test_left_pad_and_bad_arguments(tok_model):
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]
    tok, model = tok_model
    with pytest.raises(ValueError, match="no prompts"):
        generate(model, [], max_new_tokens=2, eos_id=1, pad_id=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, [[5]], max_new_tokens=0, eos_id=1, pad_id=0)


def test_fp8_rollout_copy_and_kv_cache_change_the_rollout_log_probs(tok_model):
    from fp8rl.fp8 import get_recipe, make_rollout_policy

    tok, model = tok_model
    prompts = _prompts(tok, ["1+2=", "12+45=", "123+456="] * 4)
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, greedy=True)
    plain = generate(model, prompts, **kw)
    fp8 = generate(make_rollout_policy(model, get_recipe("tensorwise")), prompts, **kw)
    fp8_kv = generate(make_rollout_policy(model, get_recipe("tensorwise"), kv_cache_fp8=True), prompts, **kw)
    m = (plain.response_mask * fp8.response_mask * fp8_kv.response_mask) > 0
    assert not torch.allclose(plain.log_probs[m], fp8.log_probs[m])  # FP8 weights and activations
    assert not torch.allclose(fp8.log_probs[m], fp8_kv.log_probs[m])  # and the FP8 KV cache on top


def test_batch_to_keeps_every_field():
    ids = torch.tensor([[5, 6, 7]])
    b = RolloutBatch(ids, torch.ones_like(ids), 1, torch.ones(1, 2), torch.zeros(1, 2), torch.tensor([False]))
    moved = b.to("cpu")
    assert moved.prompt_len == 1 and torch.equal(moved.responses, torch.tensor([[6, 7]]))
    assert all(
        torch.equal(getattr(moved, f), getattr(b, f)) for f in ("attention_mask", "log_probs", "truncated")
    )


def test_distinct_prompts_indexes_every_row():
    from fp8rl.engine.sampler import distinct_prompts

    prompts = [[1, 2], [1, 2], [3], [1, 2], [3], [4, 5, 6]]
    distinct, rows = distinct_prompts(prompts)
    assert distinct == [[1, 2], [3], [4, 5, 6]]
    assert [distinct[i] for i in rows.tolist()] == prompts


@pytest.mark.parametrize("fp8", [False, True])
def test_prefill_of_distinct_prompts_changes_no_bit(tok_model, monkeypatch, fp8):
    """Repeated prompts are prefilled once: the rollouts are bit for bit those of a full-batch prefill
    (bf16-emulated and FP8 rollout copies, FP8 KV cache included)."""
    from fp8rl.engine import sampler
    from fp8rl.fp8 import get_recipe, make_rollout_policy

    tok, model = tok_model
    recipe = get_recipe("tensorwise", "hybrid") if fp8 else None
    rollout = make_rollout_policy(model, recipe, kv_cache_fp8=fp8)
    prompts = _prompts(tok, ["1+2=", "12+45=", "7-9=", "123+456="]) * 2
    prompts = [p for p in prompts for _ in range(4)]

    def run():
        return generate(rollout, prompts, max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                        generator=torch.Generator().manual_seed(3))  # fmt: skip

    deduped = run()
    monkeypatch.setattr(sampler, "distinct_prompts", lambda p: ([list(x) for x in p], torch.arange(len(p))))
    full = run()
    for name in ("input_ids", "attention_mask", "response_mask", "log_probs", "truncated"):
        assert torch.equal(getattr(deduped, name), getattr(full, name)), name
