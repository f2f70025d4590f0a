"""A run's sample log (`samples.jsonl`, `schedule.log_samples`): the first samples of every step, written
by the rollout (fp8rl.engine.collect) through `RunDir.append_samples`, cut back to the checkpoint on
resume (`RunDir.reset_samples`)."""

from __future__ import annotations

import json

import torch

from fp8rl.engine.collect import GeneratedSamples
from fp8rl.io import read_jsonl
from fp8rl.run_files import RunDir


def test_appended_rows_carry_their_step_and_resume_keeps_those_up_to_the_checkpoint(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.reset_samples(0)
    assert not run.samples.exists()  # nothing to keep, nothing written
    for step in (1, 2, 3):
        run.append_samples(step, [{"text": f"t{step}a"}, {"text": f"t{step}b"}])
    run.append_samples(4, [])
    assert [(r["step"], r["text"]) for r in read_jsonl(run.samples)][:3] == [
        (1, "t1a"),
        (1, "t1b"),
        (2, "t2a"),
    ]
    run.reset_samples(2)  # resumed from the step-2 checkpoint: step 3's rows go
    assert [r["step"] for r in read_jsonl(run.samples)] == [1, 1, 2, 2]
    run.reset_samples(0)  # a fresh start over an old file
    assert run.samples.read_text() == ""


def test_log_rows_are_the_first_samples_then_the_flagged_ones_with_reward_format_and_gibberish_reason():
    from fp8rl.engine import longform

    gen = GeneratedSamples()
    texts = ["At first Anna has 3 apples. Then after buying 2 more, she has 3 + 2 = 5 apples. The answer is 5.",
             "qzx qzx qzx qzx", "The answer is 5."]  # fmt: skip

    class _Batch:
        response_lengths = torch.tensor([30, 4, 5])

    gen.add(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]), _Batch(), texts, longform.format_ok)
    rows = gen.log_rows(2)
    assert rows == [
        {"sample": 0, "text": texts[0], "reward": 1.0, "format_ok": True, "gibberish": None},
        {"sample": 1, "text": texts[1], "reward": 0.0, "format_ok": False, "gibberish": "format"},
        # past the first two, only the samples the detector flags (here the bare answer: no reasoning)
        {"sample": 2, "text": texts[2], "reward": 0.0, "format_ok": False, "gibberish": "format"},
    ]
    assert gen.log_rows(1) == rows[:2]  # at most n flagged ones beyond the first n
    json.dumps(rows)  # a JSON line as it is
