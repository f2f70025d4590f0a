"""The sampler records the distribution it drew each token from (`keep_distributions`), only when asked,
and score centering takes its q from that record."""

import pytest
import torch

from fp8rl.config import ArchConfig
from fp8rl.engine.collect import concat_batches
from fp8rl.engine.model import build_model
from fp8rl.engine.sampler import generate, sampler_distributions
from fp8rl.engine.tokenizer import build_char_tokenizer
from fp8rl.rl.corrections import rollout_correction

ARCH = ArchConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=48)


@pytest.fixture(scope="module")
def tok_model():
    tok = build_char_tokenizer()
    return tok, build_model(ARCH, tok, seed=0).eval()


def _generate(tok, model, keep: bool, *, temperature=0.7, top_p=0.9, texts=("1+2=", "12+45=", "7-9=")):
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(4)]
    g = torch.Generator().manual_seed(3)
    return generate(model, prompts, max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                    temperature=temperature, top_p=top_p, generator=g, keep_distributions=keep)  # fmt: skip


def test_recording_changes_no_token_and_no_log_prob(tok_model):
    tok, model = tok_model
    plain, kept = _generate(tok, model, False), _generate(tok, model, True)
    assert plain.sampler_logp is None
    assert torch.equal(plain.input_ids, kept.input_ids)
    assert torch.equal(plain.log_probs, kept.log_probs)
    assert torch.equal(plain.response_mask, kept.response_mask)


def test_the_record_is_the_distribution_of_the_sampled_tokens_log_probs(tok_model):
    tok, model = tok_model
    b = _generate(tok, model, True)
    valid = b.response_mask > 0
    assert b.sampler_logp.shape == (*b.response_mask.shape, model.config.vocab_size)
    at_token = b.sampler_logp.gather(-1, b.responses[..., None]).squeeze(-1)
    assert torch.equal(at_token[valid], b.log_probs[valid])
    sums = torch.logsumexp(b.sampler_logp, -1)
    assert torch.allclose(sums[valid], torch.zeros_like(sums[valid]), atol=1e-5)
    assert not b.sampler_logp[~valid].any()


def test_select_to_and_concat_carry_the_record(tok_model):
    tok, model = tok_model
    a = _generate(tok, model, True)
    b = _generate(tok, model, True, texts=("123+456=",))
    idx = torch.tensor([0, 5, 7])
    assert torch.equal(a.select(idx).sampler_logp, a.sampler_logp[idx])
    assert torch.equal(a.to("cpu").sampler_logp, a.sampler_logp)
    both = concat_batches([a, b], tok.pad_token_id)
    t = both.response_mask.shape[1]
    assert both.sampler_logp.shape[:2] == (len(a.log_probs) + len(b.log_probs), t)
    assert torch.equal(both.sampler_logp[: len(a.log_probs), : a.response_mask.shape[1]], a.sampler_logp)
    plain = concat_batches([a, _generate(tok, model, False)], tok.pad_token_id)
    assert plain.sampler_logp is None


def test_score_centering_takes_q_from_the_record_by_hand(tok_model):
    """One token, vocabulary of 3: the sampler drew from q = (1/2, 1/4, 1/4), the trainer has p uniform.
    Centering's coefficient is q itself and sc/tv = 0.5 (1/6 + 1/12 + 1/12) = 1/6, whatever the log-probs
    of the sampled token say."""
    tok, model = tok_model
    b = _generate(tok, model, True).select(torch.tensor([0]))
    b.response_mask = torch.zeros_like(b.response_mask)
    b.response_mask[0, 0] = 1.0
    q = torch.tensor([0.5, 0.25, 0.25])
    v = 3
    b.sampler_logp = torch.zeros(1, b.response_mask.shape[1], v)
    b.sampler_logp[0, 0] = q.log()
    old_logits = torch.zeros(1, b.response_mask.shape[1], v)  # uniform trainer distribution
    dists = sampler_distributions(b, old_logits)
    mask = b.response_mask > 0
    lp = torch.zeros_like(b.response_mask)
    corr = rollout_correction("scorecenter", lp, lp, mask, **dists)
    assert torch.allclose(corr.centering[0, 0], q.to(corr.centering.dtype))
    assert not corr.centering[0, 1:].any()
    assert corr.metrics["sc/tv"] == pytest.approx(1 / 6)
    assert corr.metrics["sc/mass"] == pytest.approx(1.0)
    capped = rollout_correction("tis_scorecenter", lp, lp, mask, cap=2.0, **dists)
    # min(p_v, cap q_v) = (1/3, 1/3, 1/3): every entry under its cap
    assert torch.allclose(capped.centering[0, 0].double(), torch.full((3,), 1 / 3, dtype=torch.float64))
    assert capped.metrics["sc/mass"] == pytest.approx(1.0)
    assert capped.metrics["sc/tv"] == pytest.approx(1 / 6)


def test_no_record_is_an_error_naming_the_flag(tok_model):
    tok, model = tok_model
    b = _generate(tok, model, False)
    with pytest.raises(ValueError, match="keep_distributions"):
        sampler_distributions(b, torch.zeros(*b.response_mask.shape, model.config.vocab_size))
