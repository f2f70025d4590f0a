"""The held-out endpoint: a checkpoint scored with the bf16 sampler on prompts no split of the tier holds.

A run's `reward/mean` is read from its own rollout, so an FP8 run's reward mixes what FP8 did to
learning with how noisy the FP8 sampler is (at step 1, before any update, an FP8 rollout already scores
below bf16 from the same weights). The held-out endpoint takes the sampler out of the comparison: every
checkpoint (a run's final one, its base, a kept mid-run one) is loaded in fp32 master weights, its
transformer linears bf16-emulated exactly as the bf16 variant's rollout copy (fp8rl.engine.precision.
bf16_emulation), and sampled on `eval.heldout.prompts` prompts drawn from the task's generator with the
tier's own task seed under the split name `heldout`, excluding every train and test prompt. Three numbers
(`eval/heldout.json`, the eval result schema, task `heldout`):

- `greedy_acc`: fraction of prompts whose greedy answer the task's verifier scores 1;
- `sampled_reward`: mean verifier reward of `eval.heldout.samples` samples per prompt at the training
  temperature (`schedule.temperature`) and length (`schedule.max_new_tokens`), from a generator seeded by
  `eval.heldout.seed`, so two checkpoints are sampled with the same random stream;
- `sampled_format`: fraction of those samples with a well-formed answer (the task's format check): the
  share of output that is still an answer at all.

Each has its binomial (greedy) or over-prompt (sampled) standard error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from fp8rl.config import ExperimentConfig
from fp8rl.engine import tasks
from fp8rl.engine.data import load_split
from fp8rl.engine.model import load_hf
from fp8rl.engine.precision import bf16_emulation
from fp8rl.engine.sampler import decode_responses, generate
from fp8rl.engine.tokenizer import encode_prompt, load_tokenizer
from fp8rl.vocabulary import HELDOUT_TASKS

SPLIT = "heldout"
BATCH = 256  # prompts per generate call


@dataclass(frozen=True)
class HeldoutScore:
    """One metric of the held-out endpoint: value, standard error, count it was measured on."""

    metric: str
    value: float
    stderr: float
    n: int


def heldout_rows(cfg: ExperimentConfig, data_dir: str | Path) -> list[dict]:
    """`eval.heldout.prompts` task rows that no split in `data_dir` (train.jsonl, test.jsonl) holds, drawn
    from the task's generator with `task.seed` and the split name `heldout`; ValueError for a task without a
    generator or a config without `eval.heldout`."""
    h = cfg.eval.heldout
    if h is None:
        raise ValueError("eval.heldout: not set in this config")
    t = cfg.task
    if t.name not in HELDOUT_TASKS:
        raise ValueError(
            f"eval.heldout: task {t.name!r} has no generator to draw held-out prompts from; "
            f"allowed: {', '.join(HELDOUT_TASKS)}"
        )
    taken = {r["prompt"] for split in ("train.jsonl", "test.jsonl") for r in load_split(data_dir, split)}
    gen = tasks.split_generator(t.name)
    try:
        return gen(t.levels, h.prompts, t.seed, split=SPLIT, exclude=taken)
    except ValueError as exc:
        raise ValueError(
            f"eval.heldout.prompts: {h.prompts} prompts beside the {len(taken)} of train and test: {exc}"
        ) from None


def _rewards(model, tokenizer, rows, prompts, verify, check, *, greedy, generator, cfg) -> tuple[list, list]:
    """Per row of `rows`: the verifier's reward and the format check of one response."""
    rewards, formats = [], []
    for i in range(0, len(rows), BATCH):
        chunk = rows[i : i + BATCH]
        batch = generate(
            model,
            prompts[i : i + BATCH],
            max_new_tokens=cfg.schedule.max_new_tokens,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            temperature=cfg.schedule.temperature,
            generator=generator,
            greedy=greedy,
        )
        texts = decode_responses(tokenizer, batch)
        rewards += [verify(t, r["answer"]) for t, r in zip(texts, chunk, strict=True)]
        formats += [float(check(t)) for t in texts]
    return rewards, formats


def _mean_se(per_prompt: list[float]) -> tuple[float, float]:
    n = len(per_prompt)
    mean = sum(per_prompt) / n
    if n < 2:
        return mean, math.nan
    var = sum((x - mean) ** 2 for x in per_prompt) / (n - 1)
    return mean, math.sqrt(var / n)


@torch.no_grad()
def score_checkpoint(cfg: ExperimentConfig, checkpoint: str | Path, rows: list[dict]) -> list[HeldoutScore]:
    """The held-out endpoint of the model in `checkpoint` on `rows` (module docstring)."""
    h = cfg.eval.heldout
    tokenizer = load_tokenizer(checkpoint)
    model = load_hf(checkpoint)
    bf16_emulation(model)
    verify, check = tasks.reward_fn(cfg.task.name), tasks.format_fn(cfg.task.name)
    prompts = [encode_prompt(tokenizer, r["prompt"]) for r in rows]
    greedy, _ = _rewards(model, tokenizer, rows, prompts, verify, check, greedy=True, generator=None, cfg=cfg)
    k = h.samples
    rep_rows = [r for r in rows for _ in range(k)]
    rep_prompts = [p for p in prompts for _ in range(k)]
    gen = torch.Generator().manual_seed(h.seed)
    sampled, formats = _rewards(
        model, tokenizer, rep_rows, rep_prompts, verify, check, greedy=False, generator=gen, cfg=cfg
    )
    n = len(rows)
    per_prompt = [sum(sampled[i * k : (i + 1) * k]) / k for i in range(n)]
    fmt_prompt = [sum(formats[i * k : (i + 1) * k]) / k for i in range(n)]
    acc = sum(greedy) / n
    out = [HeldoutScore("greedy_acc", acc, math.sqrt(acc * (1 - acc) / n), n)]
    out.append(HeldoutScore("sampled_reward", *_mean_se(per_prompt), n))
    out.append(HeldoutScore("sampled_format", *_mean_se(fmt_prompt), n))
    return out
