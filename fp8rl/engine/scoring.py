"""The trainer-side forward pass: per-token log-probs (and logits for entropy) of rollout responses.

`score` runs the full sequences (prompt + response) through a model in one forward, in whatever
precision the model computes (fp32, bf16-emulated, FP8), and returns the log-probs of the response
tokens under softmax(logits / temperature), the rollout's definition. Positions outside the response
mask are set to exactly 0 (never NaN), so masked losses stay finite. With `packed`, the forward runs on
the batch's real tokens only, packed into one row (fp8rl.engine.packing); otherwise on its padded
layout.
"""

from __future__ import annotations

import torch

from fp8rl.engine.packing import LAYOUT_KWARG, pack, packed_attention
from fp8rl.engine.sampler import RolloutBatch, position_ids


def score(
    model: torch.nn.Module,
    batch: RolloutBatch,
    *,
    temperature: float,
    return_logits: bool = False,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(log_probs [B, T], logits [B, T, V] or None)` of the response tokens; grads flow if enabled.
    Logits outside the response mask are 0 in the packed layout (never computed there)."""
    if packed:
        return _score_packed(model, batch, temperature=temperature, return_logits=return_logits)
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=position_ids(batch.attention_mask),
        use_cache=False,
    )
    p = batch.prompt_len
    logits = out.logits[:, p - 1 : -1].float() / temperature  # position i predicts token i+1
    logp = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses[..., None]).squeeze(-1)
    valid = batch.response_mask > 0
    logp = torch.where(valid, logp, torch.zeros_like(logp))
    return logp, (logits if return_logits else None)


def _score_packed(model, batch: RolloutBatch, *, temperature: float, return_logits: bool):
    packed = pack(batch)
    with packed_attention(model):
        out = model(
            input_ids=packed.input_ids,
            position_ids=packed.position_ids,
            use_cache=False,
            logits_to_keep=packed.predict_index,
            **{LAYOUT_KWARG: packed.layout},
        )
    logits = out.logits[0].float() / temperature  # [R, V]: row r predicts response token r
    lp = torch.log_softmax(logits, dim=-1).gather(-1, packed.targets[:, None]).squeeze(-1)
    where = (packed.rows, packed.cols)
    logp = lp.new_zeros(batch.response_mask.shape).index_put(where, lp)
    if not return_logits:
        return logp, None
    full = logits.new_zeros(*batch.response_mask.shape, logits.shape[-1]).index_put(where, logits)
    return logp, full
