"""The rollout sampler: batched, KV-cached autoregressive sampling with per-token log-probs.

`generate` left-pads a batch of prompts, runs one prefill forward (logits of the last position only) over
the distinct prompts only (GRPO repeats each prompt `group_size` times; every row's prefill is independent
of the others, so its logits and KV cache are those of the full batch, bit for bit) and copies the result
to every row that repeats it, then one single-token forward per new token against the model's KV cache, sampling with temperature and
top-p (nucleus) from an explicit `torch.Generator`, so a seed gives the same rollouts (on a CUDA model the
tokens come from a CUDA generator seeded by the given one: fp8rl.engine.device). The model is
whatever the rollout runs: the bf16-emulated or FP8 rollout copy of the policy, so the returned
log-probs are the rollout engine's own, and their difference from the trainer's recomputed log-probs is
the real rollout/trainer mismatch. A log-prob is that of the sampled token under the temperature-scaled
distribution before top-p truncation (what the trainer recomputes). A sequence ends at `<eos>` (which is
part of its response and its mask) or at `max_new_tokens`; later positions hold `<pad>` with mask 0.

With `keep_distributions`, `generate` also records, at every response position, the full next-token
distribution it sampled from (`RolloutBatch.sampler_logp`, [B, T, V] log-probabilities under the
temperature, over the whole vocabulary: the tiers' vocabularies are small). It is the distribution of
the returned log-probs: before the top-p cut, so at `top_p < 1` the tokens came from its renormalised
nucleus. Score centering reads it as the sampler's q (fp8rl.rl.corrections.scorecenter). Off by default:
nothing else is computed, and the tokens and log-probs are the same either way.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM

from fp8rl.engine.device import generator_on, module_device
from fp8rl.engine.divergence import Diverged
from fp8rl.engine.kv_reserve import reserve
from fp8rl.engine.token_draw import MULTINOMIAL, draw_tokens

# transformers >= 5.2x names the KV-cache argument `cache`; earlier releases `past_key_values`.
CACHE_KWARG = (
    "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"
)


@dataclass
class RolloutBatch:
    """Prompts and sampled responses of one batch, laid out for the trainer's forward pass."""

    input_ids: torch.Tensor  # [B, P+T] left-padded prompt, then the response (pad after it ends)
    attention_mask: torch.Tensor  # [B, P+T] 1 on real tokens (prompt and response incl. eos)
    prompt_len: int  # P: the padded prompt width
    response_mask: torch.Tensor  # [B, T] float 0/1
    log_probs: torch.Tensor  # [B, T] rollout log-probs (0 where masked)
    truncated: torch.Tensor  # [B] bool: hit max_new_tokens without <eos>
    # [B, T, V] the sampler's log-distribution at each response position (`keep_distributions`; 0 where
    # masked); None when not recorded
    sampler_logp: torch.Tensor | None = None

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1).long()

    def to(self, device: torch.device | str) -> RolloutBatch:
        """The same batch with its tensors on `device`."""
        t = (self.input_ids, self.attention_mask, self.response_mask, self.log_probs, self.truncated)
        ids, att, rmask, lps, trunc = (x.to(device) for x in t)
        dist = None if self.sampler_logp is None else self.sampler_logp.to(device)
        return RolloutBatch(ids, att, self.prompt_len, rmask, lps, trunc, dist)

    def select(self, idx: torch.Tensor) -> RolloutBatch:
        """The sub-batch of rows `idx`."""
        return RolloutBatch(
            self.input_ids[idx],
            self.attention_mask[idx],
            self.prompt_len,
            self.response_mask[idx],
            self.log_probs[idx],
            self.truncated[idx],
            None if self.sampler_logp is None else self.sampler_logp[idx],
        )


def sampler_distributions(batch: RolloutBatch, old_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a correction that needs distributions (score centering) reads: the trainer's logits of the
    step and the distributions the sampler drew from (`generate(..., keep_distributions=True)`)."""
    if batch.sampler_logp is None:
        raise ValueError("sampler_distributions: the batch has no sampler distributions; generate it with "
                         "keep_distributions=True")  # fmt: skip
    if batch.sampler_logp.shape != old_logits.shape:
        raise ValueError(
            f"sampler_distributions: the sampler's distributions {tuple(batch.sampler_logp.shape)} and the "
            f"trainer's logits {tuple(old_logits.shape)} differ in shape"
        )
    return {"old_logits": old_logits, "rollout_logits": batch.sampler_logp}


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into `(ids [B, P], mask [B, P])`."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids, mask


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], torch.Tensor]:
    """`(distinct, rows)`: the distinct prompts in order of first appearance, and for each prompt of
    `prompts` the index of its copy in `distinct` (`[distinct[i] for i in rows]` is `prompts`)."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return [list(p) for p in index], torch.tensor(rows, dtype=torch.long)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only (left padding does not shift them)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def sample_tokens(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    greedy: bool,
    draw: str = MULTINOMIAL,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from `logits [B, V]` by `draw` (fp8rl.engine.token_draw); returns (tokens
    [B], log-probs [B]) where the log-prob is under softmax(logits / temperature) (greedy: argmax, same
    log-prob definition).
    `Diverged` (fp8rl.engine.divergence) when a logit is NaN or +inf: blown-up weights, not a crash."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    if bool(torch.isnan(logp).any()):  # a NaN or +inf logit (-inf: a token of probability 0, fine)
        raise Diverged("non-finite sampling distribution (NaN or inf in the rollout policy's logits)")
    if greedy:
        tok = logp.argmax(-1)
    else:
        probs = logp.exp()
        if top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < top_p  # always keeps the most likely token
            sorted_p = sorted_p * keep
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        tok = draw_tokens(probs, generator, draw)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    keep_distributions: bool = False,
    reserve_cache: bool | None = None,
    draw: str = MULTINOMIAL,
) -> RolloutBatch:
    """Sample one response per prompt (repeat a prompt n times for n samples); see the module doc
    (`keep_distributions`: also record each position's sampling distribution; `reserve_cache=False`,
    or `FP8RL_SAMPLER_CACHE=grow` in the environment when it is not given: grow the KV cache by
    concatenation, as `transformers` does, instead of writing it in place — the same tokens and
    log-probs, slower: for benchmarks and the bit-identity test; `draw`: how a token is drawn from its
    distribution, fp8rl.engine.token_draw)."""
    if not prompts:
        raise ValueError("generate: no prompts")
    if max_new_tokens <= 0:
        raise ValueError(f"generate: max_new_tokens must be > 0, got {max_new_tokens}")
    device = module_device(model)
    generator = generator_on(generator, device)
    distinct, rows = distinct_prompts(prompts)
    ids, mask = (t.to(device) for t in left_pad(distinct, pad_id))
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=True, logits_to_keep=1
    )
    cache = _cache_of(out)
    logits = out.logits[:, -1]
    if len(distinct) < len(prompts):
        rows = rows.to(device)
        cache.batch_select_indices(rows)
        ids, mask, logits = ids[rows], mask[rows], logits[rows]
    bsz, plen = ids.shape
    if reserve_cache is None:
        reserve_cache = os.environ.get("FP8RL_SAMPLER_CACHE", "reserved") != "grow"
    if reserve_cache:
        reserve(cache, plen + max_new_tokens)
    next_pos = mask.sum(-1, keepdim=True)  # [B, 1] position of the first response token
    tokens = torch.full((bsz, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((bsz, max_new_tokens), device=device)
    resp_mask = torch.zeros((bsz, max_new_tokens), device=device)
    done = torch.zeros(bsz, dtype=torch.bool, device=device)
    dists = None
    if keep_distributions:
        dists = torch.zeros((bsz, max_new_tokens, logits.shape[-1]), device=device)
    one = torch.ones((bsz, 1), dtype=mask.dtype, device=device)
    full_mask = mask
    for t in range(max_new_tokens):
        tok, lp = sample_tokens(
            logits, temperature=temperature, top_p=top_p, generator=generator, greedy=greedy, draw=draw
        )
        live = ~done
        tokens[:, t] = torch.where(live, tok, torch.full_like(tok, pad_id))
        logps[:, t] = torch.where(live, lp, torch.zeros_like(lp))
        resp_mask[:, t] = live.float()
        if dists is not None:  # the distribution `sample_tokens` drew from, before top-p
            logq = torch.log_softmax(logits.float() / temperature, dim=-1)
            dists[:, t] = torch.where(live[:, None], logq, torch.zeros_like(logq))
        done = done | (tok == eos_id)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        full_mask = torch.cat([full_mask, one], dim=1)
        out = model(
            input_ids=tokens[:, t : t + 1],
            attention_mask=full_mask,
            position_ids=next_pos + t,
            use_cache=True,
            **{CACHE_KWARG: cache},
        )
        cache = _cache_of(out)
        logits = out.logits[:, -1]
    input_ids = torch.cat([ids, tokens], dim=1)
    attention_mask = torch.cat([mask, resp_mask.long()], dim=1)
    return RolloutBatch(
        input_ids, attention_mask, plen, resp_mask, logps, truncated=~done, sampler_logp=dists
    )


def _cache_of(out) -> object:
    return out.cache if hasattr(out, "cache") else out.past_key_values


def decode_responses(tokenizer, batch: RolloutBatch) -> list[str]:
    """Response texts without special tokens (the `<eos>` and padding are dropped)."""
    return tokenizer.batch_decode(batch.responses.tolist(), skip_special_tokens=True)
