"""Training on real tokens only: the packed forward against the padded one, and what it computes on."""

import pytest
import torch

from fp8rl.config import ArchConfig
from fp8rl.engine.model import build_model
from fp8rl.engine.packing import PACKED_ATTENTION, pack, packed_attention
from fp8rl.engine.sampler import RolloutBatch, generate
from fp8rl.engine.scoring import score
from fp8rl.engine.tokenizer import build_char_tokenizer

# two KV heads for four query heads: the grouped-query path of the attention is exercised too
ARCH = ArchConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64,
                  max_position_embeddings=64)  # fmt: skip
PROMPTS = ["1+2=", "12+45=", "7-9=", "tool:9-3=", "100+1=", "3="]


@pytest.fixture(scope="module")
def tok_model():
    tok = build_char_tokenizer()
    return tok, build_model(ARCH, tok, seed=0)


@pytest.fixture(scope="module")
def batch(tok_model) -> RolloutBatch:
    tok, model = tok_model
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in PROMPTS] * 4
    g = torch.Generator().manual_seed(3)
    out = generate(model, prompts, max_new_tokens=12, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                   temperature=1.5, generator=g)  # fmt: skip
    lengths = out.response_lengths
    # the batch must have padding on both sides for the comparison to mean anything
    assert lengths.min() < lengths.max() and len({len(p) for p in PROMPTS}) > 1
    return out


def test_packed_log_probs_logits_and_gradients_equal_the_padded_forward(tok_model, batch):
    _, model = tok_model
    m = batch.response_mask > 0
    out, grads = {}, []
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        lp, logits = score(model, batch, temperature=0.8, return_logits=True, packed=packed)
        (lp * torch.linspace(-1, 1, lp.numel()).view_as(lp)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        out[packed] = lp.detach(), logits.detach()
    (lp, logits), (ref_lp, ref_logits) = out[True], out[False]
    assert torch.allclose(lp, ref_lp, atol=2e-6, rtol=0) and torch.all(lp[~m] == 0)
    assert torch.allclose(logits[m], ref_logits[m], atol=2e-6, rtol=0) and torch.all(logits[~m] == 0)
    for name, g in grads[0].items():
        assert torch.allclose(grads[1][name], g, atol=1e-6 * float(g.abs().max()) + 1e-9), name


def test_the_packed_row_holds_real_tokens_only(tok_model, batch):
    tok, _ = tok_model
    p = pack(batch)
    n_real = int(batch.attention_mask.sum())
    assert p.input_ids.shape == (1, n_real) and tok.pad_token_id not in p.input_ids.tolist()
    # positions restart at 0 for each sequence and count its real tokens
    starts = (p.position_ids[0] == 0).nonzero().flatten()
    assert len(starts) == len(batch.input_ids)
    assert torch.equal(torch.diff(torch.cat([starts, torch.tensor([n_real])])), batch.attention_mask.sum(1))
    # the logits kept predict exactly the response tokens, each from the token before it
    m = batch.response_mask > 0
    assert torch.equal(p.targets, batch.responses[m]) and len(p.predict_index) == int(m.sum())
    assert torch.equal(p.input_ids[0, p.predict_index + 1], p.targets)


def test_every_linear_layer_runs_on_the_real_tokens_only(tok_model, batch):
    _, model = tok_model
    rows: dict[str, int] = {}

    def count(name):
        def hook(mod, args) -> None:
            rows[name] = args[0].shape[:-1].numel()

        return hook

    hooks = [
        mod.register_forward_pre_hook(count(n))
        for n, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear)
    ]
    try:
        with torch.no_grad():
            score(model, batch, temperature=1.0, packed=True)
    finally:
        for h in hooks:
            h.remove()
    n_real, n_response = int(batch.attention_mask.sum()), int(batch.response_mask.sum())
    assert n_real < batch.input_ids.numel()  # the padded layout computes more
    assert rows.pop("lm_head") == n_response  # the head only where a response token is predicted
    assert rows and set(rows.values()) == {n_real}


def test_the_model_s_attention_implementation_is_restored(tok_model, batch):
    _, model = tok_model
    with pytest.raises(RuntimeError, match="inside"), packed_attention(model):
        assert model.config._attn_implementation == PACKED_ATTENTION
        raise RuntimeError("inside")
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        score(model, batch, temperature=1.0, packed=True)
    assert model.config._attn_implementation == "sdpa"


def test_a_batch_that_is_not_a_rollout_layout_is_refused(batch):
    gap = RolloutBatch(batch.input_ids, batch.attention_mask.clone(), batch.prompt_len,
                       batch.response_mask.clone(), batch.log_probs, batch.truncated)  # fmt: skip
    row = int(batch.response_lengths.argmax())
    gap.response_mask[row, 1] = 0
    gap.attention_mask[row, batch.prompt_len + 1] = 0
    with pytest.raises(ValueError, match="gap"):
        pack(gap)
    bad = RolloutBatch(batch.input_ids, batch.attention_mask, batch.prompt_len,
                       batch.response_mask.roll(1, dims=1), batch.log_probs, batch.truncated)  # fmt: skip
    with pytest.raises(ValueError, match="not the response mask"):
        pack(bad)
