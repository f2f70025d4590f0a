"""The rollout phase: GRPO groups, DAPO dynamic sampling and overlong shaping, re-padding of batches."""

import torch

from fp8rl.config import ArchConfig, DAPOConfig, GRPOConfig, ScheduleConfig
from fp8rl.engine.collect import collect_rollouts, concat_batches
from fp8rl.engine.model import build_model
from fp8rl.engine.sampler import generate
from fp8rl.engine.tokenizer import build_char_tokenizer

ARCH = ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
TOK = build_char_tokenizer()
MODEL = build_model(ARCH, TOK, seed=0).eval()
PROMPTS = [TOK(p, add_special_tokens=False)["input_ids"] for p in ["1+2=", "12+45=", "123+456=", "7-8="]]
ANSWERS = ["3", "57", "579", "-1"]
SCHED = ScheduleConfig(prompts_per_step=3, max_new_tokens=4, temperature=1.5)


def test_grpo_keeps_every_group_with_normalised_advantages():
    verifier = lambda text, answer: float(len(text) % 2)  # noqa: E731 - varied rewards from a random model
    ro = collect_rollouts(MODEL, TOK, PROMPTS, ANSWERS, algo=GRPOConfig(group_size=4), schedule=SCHED,
                          generator=torch.Generator().manual_seed(0), verifier=verifier)  # fmt: skip
    assert ro.batch.input_ids.shape[0] == 12 and ro.metrics["rollout/samples"] == 12
    groups = ro.advantages.view(3, 4)
    assert torch.allclose(groups.sum(1), torch.zeros(3), atol=1e-5)  # zero mean per group
    assert "dapo/kept_groups" not in ro.metrics
    assert ro.metrics["tok/rollout"] == float(ro.batch.response_mask.sum())


def test_dapo_drops_flat_groups_and_refills_from_new_prompts():
    calls = []

    def verifier(text, answer):  # prompt "1+2=" always wrong: its groups are flat and dropped
        calls.append(answer)
        return 0.0 if answer == "3" else float(len(text) % 2)

    algo = DAPOConfig(group_size=4, max_resample_rounds=3, overlong_buffer_len=0)
    ro = collect_rollouts(MODEL, TOK, PROMPTS, ANSWERS, algo=algo, schedule=SCHED,
                          generator=torch.Generator().manual_seed(1), verifier=verifier)  # fmt: skip
    kept = int(ro.metrics["dapo/kept_groups"])
    assert kept == ro.batch.input_ids.shape[0] // 4 <= 3
    assert ro.metrics["rollout/samples"] == len(calls) > 12  # it sampled more rounds
    assert ro.metrics["dapo/dropped_groups"] >= 1
    r = ro.rewards.view(-1, 4)
    assert bool((r != r[:, :1]).any(1).all())  # every kept group has varied rewards


def test_dapo_overlong_penalty_lowers_rewards_of_long_responses():
    verifier = lambda text, answer: 1.0  # noqa: E731
    algo = DAPOConfig(
        group_size=4, dynamic_sampling=False, overlong_buffer_len=2, overlong_penalty_factor=1.0
    )
    ro = collect_rollouts(MODEL, TOK, PROMPTS, ANSWERS, algo=algo, schedule=SCHED,
                          generator=torch.Generator().manual_seed(2), verifier=verifier)  # fmt: skip
    lengths = ro.batch.response_lengths.float()
    expected = 1.0 + torch.clamp(-(lengths - 2) / 2, max=0.0)  # full reward up to 2 tokens, -1 at 4
    assert torch.allclose(ro.rewards, expected)
    assert ro.metrics["acc/mean"] == 1.0 and ro.metrics["reward/mean"] < 1.0


def test_concat_batches_repads_prompts_and_responses():
    kw = dict(eos_id=TOK.eos_token_id, pad_id=TOK.pad_token_id, greedy=True)
    a = generate(MODEL, PROMPTS[:1], max_new_tokens=2, **kw)
    b = generate(MODEL, PROMPTS[2:3], max_new_tokens=4, **kw)
    both = concat_batches([a, b], TOK.pad_token_id)
    assert both.prompt_len == b.prompt_len and both.response_mask.shape == (2, 4)
    assert torch.equal(both.responses[0, :2], a.responses[0]) and torch.equal(
        both.responses[1], b.responses[0]
    )
    real = both.input_ids[0][both.attention_mask[0] > 0]
    assert torch.equal(real, a.input_ids[0][a.attention_mask[0] > 0])  # same tokens, only padding moved
    assert torch.equal(both.log_probs[0, :2], a.log_probs[0]) and both.log_probs[0, 2:].abs().sum() == 0
