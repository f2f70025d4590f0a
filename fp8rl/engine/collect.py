"""One step's rollout phase: prompts → n samples each → verifier rewards → (DAPO) shaping and dynamic
sampling → GRPO advantages.

GRPO samples `prompts_per_step` prompts × `group_size` and trains on all of them. DAPO adds the soft
overlong penalty to the task reward and, with `dynamic_sampling`, drops the groups whose rewards are all
equal and samples up to `max_resample_rounds` more batches of fresh prompts to refill them (as verl's
DAPO recipe does), keeping at most `prompts_per_step` groups. The `reward/*`, `acc/*`, `resp_len/*` and
`gibberish/rate` metrics describe every sample generated in the step (all rounds); `acc/mean` is the
unshaped task accuracy, `reward/mean` the shaped reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fp8rl.config import DAPOConfig, GRPOConfig, ScheduleConfig
from fp8rl.engine import tasks
from fp8rl.engine.sampler import RolloutBatch, decode_responses, generate
from fp8rl.vocabulary import ACC_MEAN, GIBBERISH_RATE, RESP_LEN_MEAN, REWARD_MEAN


@dataclass
class StepRollout:
    batch: RolloutBatch | None  # the sequences to train on (None: DAPO kept no group)
    rewards: torch.Tensor  # [B] shaped rewards of `batch`
    advantages: torch.Tensor  # [B]
    metrics: dict[str, float]
    samples: list[dict] = field(default_factory=list)  # `schedule.log_samples` rows for samples.jsonl


def concat_batches(batches: list[RolloutBatch], pad_id: int) -> RolloutBatch:
    """Stack rollout batches whose prompt / response widths may differ (re-padded: prompts on the left)."""
    if len(batches) == 1:
        return batches[0]
    p = max(b.prompt_len for b in batches)
    t = max(b.response_mask.shape[1] for b in batches)

    def pad(x: torch.Tensor, left: int, right: int, value: float) -> torch.Tensor:
        return torch.nn.functional.pad(x, (left, right), value=value)

    ids, att, rmask, lps, trunc = [], [], [], [], []
    dists = [] if all(b.sampler_logp is not None for b in batches) else None
    for b in batches:
        lp, rt = p - b.prompt_len, t - b.response_mask.shape[1]
        prompt, resp = b.input_ids[:, : b.prompt_len], b.input_ids[:, b.prompt_len :]
        pm, rm = b.attention_mask[:, : b.prompt_len], b.attention_mask[:, b.prompt_len :]
        ids.append(torch.cat([pad(prompt, lp, 0, pad_id), pad(resp, 0, rt, pad_id)], 1))
        att.append(torch.cat([pad(pm, lp, 0, 0), pad(rm, 0, rt, 0)], 1))
        rmask.append(pad(b.response_mask, 0, rt, 0.0))
        lps.append(pad(b.log_probs, 0, rt, 0.0))
        trunc.append(b.truncated)
        if dists is not None:
            dists.append(torch.nn.functional.pad(b.sampler_logp, (0, 0, 0, rt), value=0.0))
    dist = None if dists is None else torch.cat(dists)
    return RolloutBatch(
        torch.cat(ids), torch.cat(att), p, torch.cat(rmask), torch.cat(lps), torch.cat(trunc), dist
    )


@dataclass
class GeneratedSamples:
    """Every sample generated in one step, across DAPO's resampling rounds: what the step's `reward/*`,
    `acc/*`, `resp_len/*` and `gibberish/rate` metrics describe (not only the samples kept to train on)."""

    acc: list[torch.Tensor] = field(default_factory=list)  # per round: [n] unshaped task accuracy
    rewards: list[torch.Tensor] = field(default_factory=list)  # per round: [n] shaped rewards
    lengths: list[torch.Tensor] = field(default_factory=list)  # per round: [n] response lengths
    texts: list[str] = field(default_factory=list)
    format_ok: list[bool] = field(default_factory=list)

    def add(
        self,
        acc: torch.Tensor,
        rewards: torch.Tensor,
        batch: RolloutBatch,
        texts: list[str],
        format_check=tasks.format_ok,
    ) -> None:
        self.acc.append(acc)
        self.rewards.append(rewards)
        self.lengths.append(batch.response_lengths.float())
        self.texts += texts
        self.format_ok += [format_check(t) for t in texts]

    def log_rows(self, n: int) -> list[dict]:
        """Rows of a run's `samples.jsonl` (without the step): the first `n` samples, then up to `n` more
        of the step's other samples that the gibberish detector judges gibberish (in generation order),
        so that a step whose first samples are still clean shows what the detector saw. Each row:
        `sample` (its index in the step), `text`, `reward` (the unshaped task accuracy), `format_ok` and
        `gibberish` (fp8rl.rl.gibberish_reason, None when the sample is not gibberish). Logging only:
        nothing here feeds training."""
        from fp8rl.rl import gibberish_reason

        acc = torch.cat(self.acc).tolist() if self.acc else []
        rows = [
            {
                "sample": i,
                "text": t,
                "reward": float(a),
                "format_ok": ok,
                "gibberish": gibberish_reason(t, ok),
            }
            for i, (t, a, ok) in enumerate(zip(self.texts, acc, self.format_ok, strict=True))
        ]
        flagged = [r for r in rows[n:] if r["gibberish"] is not None]
        return rows[:n] + flagged[:n]

    def metrics(self) -> dict[str, float]:
        from fp8rl.rl import gibberish_rate

        lengths = torch.cat(self.lengths)
        return {
            REWARD_MEAN: float(torch.cat(self.rewards).mean()),
            ACC_MEAN: float(torch.cat(self.acc).mean()),
            RESP_LEN_MEAN: float(lengths.mean()),
            "tok/rollout": float(lengths.sum()),
            "rollout/samples": float(len(self.texts)),
            GIBBERISH_RATE: float(gibberish_rate(self.texts, self.format_ok)),
        }


def collect_rollouts(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: list[list[int]],
    answers: list[str],
    *,
    algo: GRPOConfig | DAPOConfig,
    schedule: ScheduleConfig,
    generator: torch.Generator,
    verifier=tasks.reward,
    format_check=tasks.format_ok,
    keep_distributions: bool = False,
) -> StepRollout:
    """Run the rollout phase of one step with `model` (the rollout copy), scoring each response with
    `verifier(response, answer)` (`format_check(response)`: has it the task's answer format, for the
    gibberish rate); see the module doc. `keep_distributions`: the batch carries the sampler's
    per-position distributions (`RolloutBatch.sampler_logp`, for score centering)."""
    from fp8rl.rl import dynamic_sampling_mask, grpo_advantages, overlong_penalty

    g = algo.group_size
    dapo = isinstance(algo, DAPOConfig)
    refill = dapo and algo.dynamic_sampling
    rounds = 1 + (algo.max_resample_rounds if refill else 0)
    kept_batches: list[RolloutBatch] = []
    kept_rewards: list[torch.Tensor] = []
    kept_groups = dropped = 0
    generated = GeneratedSamples()
    for _ in range(rounds):
        need = schedule.prompts_per_step - kept_groups
        pick = torch.randperm(len(prompt_ids), generator=generator)[: schedule.prompts_per_step].tolist()
        prompts = [prompt_ids[i] for i in pick for _ in range(g)]
        batch = generate(
            model,
            prompts,
            max_new_tokens=schedule.max_new_tokens,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            temperature=schedule.temperature,
            top_p=schedule.top_p,
            generator=generator,
            keep_distributions=keep_distributions,
            draw=schedule.sampler_draw,
        )
        texts = decode_responses(tokenizer, batch)
        device = batch.response_mask.device
        acc = torch.tensor([verifier(t, answers[pick[i // g]]) for i, t in enumerate(texts)], device=device)
        rewards = acc.clone()
        if dapo and algo.overlong_buffer_len > 0:
            rewards = rewards + overlong_penalty(
                batch.response_lengths,
                schedule.max_new_tokens,
                algo.overlong_buffer_len,
                algo.overlong_penalty_factor,
            )
        generated.add(acc, rewards, batch, texts, format_check)
        if refill:
            keep, n_drop = dynamic_sampling_mask(rewards, g)
            dropped += n_drop
            idx = keep.nonzero().squeeze(-1)[: need * g]
        else:
            idx = torch.arange(len(texts), device=device)
        if len(idx):
            kept_batches.append(batch.select(idx))
            kept_rewards.append(rewards[idx])
            kept_groups += len(idx) // g
        if kept_groups >= schedule.prompts_per_step:
            break
    metrics = generated.metrics()
    if refill:
        metrics["dapo/dropped_groups"] = float(dropped)
        metrics["dapo/kept_groups"] = float(kept_groups)
    samples = generated.log_rows(schedule.log_samples) if schedule.log_samples else []
    if not kept_batches:
        empty = torch.zeros(0)
        return StepRollout(None, empty, empty, metrics, samples)
    batch = concat_batches(kept_batches, tokenizer.pad_token_id)
    rewards = torch.cat(kept_rewards)
    adv = grpo_advantages(rewards, g, norm_std=algo.norm_adv_by_std)
    return StepRollout(batch, rewards, adv, metrics, samples)
