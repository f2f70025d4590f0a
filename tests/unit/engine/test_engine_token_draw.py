"""The sampler's token draws (fp8rl.engine.token_draw): both draw from the row's distribution, the
inverse-CDF draw never takes a token of probability 0, its sums are the sequential fp64 sums on every
thread count, the default draw is torch.multinomial's, and a config without the key keeps its digest."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fp8rl.config import ArchConfig
from fp8rl.config.training import ScheduleConfig
from fp8rl.engine.model import build_model
from fp8rl.engine.sampler import generate, sample_tokens
from fp8rl.engine.token_draw import DRAWS, draw_tokens
from fp8rl.engine.tokenizer import build_char_tokenizer

ARCH = ArchConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, max_position_embeddings=48)


def _probs(rows: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, vocab, generator=g) * 2.0, dim=-1)


@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_each_draw_samples_the_rows_distribution(draw):
    # one 12-token distribution with a wide range of probabilities, 200k draws: every token's count within
    # 5 binomial standard deviations of its expectation (a wrong draw, e.g. off by one token, is far out)
    p = torch.tensor([0.30, 0.20, 0.15, 0.10, 0.08, 0.06, 0.04, 0.03, 0.02, 0.01, 0.007, 0.003])
    n = 200_000
    probs = p.expand(n, -1).contiguous()
    tok = draw_tokens(probs, torch.Generator().manual_seed(1), draw)
    counts = torch.bincount(tok, minlength=len(p)).double()
    expected = n * p.double()
    sd = (n * p.double() * (1 - p.double())).sqrt()
    assert torch.all((counts - expected).abs() < 5 * sd), (counts, expected)


def test_inverse_cdf_never_draws_a_token_of_probability_zero():
    # zeros everywhere but a few tokens, the last token of the row included or not, and one row whose
    # only positive token is the first: u * total rounding to the total must not step past them
    probs = torch.zeros(6, 50)
    probs[0, [3, 7]] = torch.tensor([0.5, 0.5])
    probs[1, [0]] = 1.0
    probs[2, [10, 49]] = torch.tensor([1e-30, 1.0])
    probs[3, [48]] = 1.0
    probs[4, :] = 1.0 / 50
    probs[5, [20, 21]] = torch.tensor([1.0, 1e-38])
    g = torch.Generator().manual_seed(0)
    for _ in range(500):
        tok = draw_tokens(probs, g, "inverse_cdf")
        assert bool((probs.gather(1, tok[:, None]) > 0).all())


def test_inverse_cdf_takes_the_last_positive_token_where_the_uniform_rounds_to_the_total(monkeypatch):
    # u * total rounded up to the total itself (u = 1 stands in for it): without the clamp the draw would
    # be the index past the end, or a trailing token of probability 0
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0], [0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.ones(*shape, dtype=kw.get("dtype")))
    assert draw_tokens(probs, None, "inverse_cdf").tolist() == [2, 1, 3]


def test_inverse_cdf_sums_are_sequential_and_thread_independent():
    probs = _probs(64, 4096, seed=3)
    want = np.add.accumulate(probs.numpy().astype(np.float64), axis=-1)  # one after the other, in fp64
    got = {}
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            assert np.array_equal(probs.double().cumsum(-1).numpy(), want)
            got[threads] = draw_tokens(probs, torch.Generator().manual_seed(7), "inverse_cdf")
    finally:
        torch.set_num_threads(before)
    assert torch.equal(got[1], got[2])


def test_default_draw_is_torch_multinomial_and_unknown_draw_is_refused():
    logits = torch.randn(8, 40, generator=torch.Generator().manual_seed(2))
    tok, _ = sample_tokens(logits, temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(5),
                           greedy=False)  # fmt: skip
    probs = torch.log_softmax(logits.float(), dim=-1).exp()
    ref = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5)).squeeze(-1)
    assert torch.equal(tok, ref)
    with pytest.raises(ValueError, match="known draws are multinomial, inverse_cdf"):
        draw_tokens(probs, None, "gumbel")


def test_generate_with_inverse_cdf_keeps_the_nucleus_and_its_log_probs():
    tok = build_char_tokenizer()
    model = build_model(ARCH, tok, seed=0).eval()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("1+2=", "12+45=")] * 4
    kw = dict(max_new_tokens=6, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, top_p=0.5,
              keep_distributions=True)  # fmt: skip
    a = generate(model, prompts, generator=torch.Generator().manual_seed(0), draw="inverse_cdf", **kw)
    b = generate(model, prompts, generator=torch.Generator().manual_seed(0), draw="inverse_cdf", **kw)
    assert torch.equal(a.input_ids, b.input_ids)  # a seed gives the same rollout
    resp = a.input_ids[:, a.prompt_len :]
    q = a.sampler_logp.gather(-1, resp[..., None]).squeeze(-1)
    live = a.response_mask.bool()
    assert torch.equal(q[live], a.log_probs[live])  # the returned log-prob is the distribution's
    # every token drawn lies inside its position's top-p nucleus (the sorted mass before it < 0.5)
    p = a.sampler_logp.exp()
    mass_before = (p * (p > p.gather(-1, resp[..., None]))).sum(-1)
    assert bool((mass_before[live] < 0.5).all())


def test_a_schedule_at_the_default_draw_keeps_its_dump():
    assert "sampler_draw" not in ScheduleConfig().model_dump()
    assert ScheduleConfig(sampler_draw="inverse_cdf").model_dump()["sampler_draw"] == "inverse_cdf"
    with pytest.raises(ValueError, match="sampler_draw"):
        ScheduleConfig(sampler_draw="gumbel")


def test_the_config_offers_every_registered_draw():
    from typing import get_args

    assert set(get_args(ScheduleConfig.model_fields["sampler_draw"].annotation)) == set(DRAWS)
