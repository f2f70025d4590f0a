"""Quick in-process accuracy of a policy on task rows (used by SFT's report and the trainer's tests).

This is not the benchmark evaluation (that is lm-eval over the saved checkpoint, `fp8rl eval`); it is
the reference sampler run over a split, scored with the task's verifier.
"""

from __future__ import annotations

import torch

from fp8rl.engine import tasks
from fp8rl.engine.sampler import decode_responses, generate


def accuracy(
    model: torch.nn.Module,
    tokenizer,
    rows: list[dict],
    *,
    max_new_tokens: int,
    greedy: bool = False,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    batch_size: int = 256,
    verifier=tasks.reward,
) -> float:
    """Fraction of `rows` whose response (one sample, or greedy) gets reward 1 from `verifier(response,
    answer)` (the task's: fp8rl.engine.tasks.reward_fn; the arithmetic one by default)."""
    correct = 0.0
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        prompts = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in chunk]
        batch = generate(
            model,
            prompts,
            max_new_tokens=max_new_tokens,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            temperature=temperature,
            generator=generator,
            greedy=greedy,
        )
        texts = decode_responses(tokenizer, batch)
        correct += sum(verifier(t, r["answer"]) for t, r in zip(texts, chunk, strict=True))
    return correct / max(len(rows), 1)
