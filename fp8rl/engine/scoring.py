"""The trainer-side forward pass: per-token log-probs (and logits for entropy) of rollout responses.

`score` runs the full sequences (prompt + response) through a model in one forward, in whatever
precision the model computes (fp32, bf16-emulated, FP8), and returns the log-probs of the response
tokens under softmax(logits / temperature), the rollout's definition. Positions outside the response
mask are set to exactly 0 (never NaN), so masked losses stay finite.
"""

from __future__ import annotations

import torch

from fp8rl.engine.sampler import RolloutBatch, position_ids


def score(
    model: torch.nn.Module, batch: RolloutBatch, *, temperature: float, return_logits: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(log_probs [B, T], logits [B, T, V] or None)` of the response tokens; grads flow if enabled."""
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
