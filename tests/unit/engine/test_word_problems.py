"""The small tier's task: generated word problems, their splits, verifier and format check, and the
chat-template prompt encoding (a stub tokenizer; the real one is tested in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.config.runs import expand_matrix
from fp8rl.config_loader import load_config
from fp8rl.engine import tasks, word_problems
from fp8rl.engine.data import build_splits
from fp8rl.engine.tokenizer import build_char_tokenizer, encode_prompt

ROOT = Path(__file__).resolve().parents[3]


def test_splits_are_seeded_disjoint_and_answered():
    levels = list(word_problems.LEVELS)
    test = word_problems.generate_split(levels, 40, 7, split="test")
    train = word_problems.generate_split(levels, 200, 7, split="train", exclude={r["prompt"] for r in test})
    assert test == word_problems.generate_split(levels, 40, 7, split="test")
    assert test != word_problems.generate_split(levels, 40, 8, split="test")
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in train}
    assert {r["level"] for r in train} == set(levels)
    for r in train:
        assert r["solution"].endswith(f"#### {r['answer']}")
        assert int(r["answer"]) >= 0
        # the worked solution's last line states the answer: math-verify accepts it
        assert tasks.math_reward(r["solution"], r["answer"]) == 1.0


def test_unknown_level_is_named():
    with pytest.raises(ValueError, match="unknown word-problem level carry"):
        word_problems.generate_split(["add", "carry"], 5, 0, split="test")


def test_verifier_and_format_check_of_word_problems():
    reward, fmt = tasks.reward_fn("word_problems"), tasks.format_fn("word_problems")
    assert reward("There are 6 cats and 2 dogs, which is 6 + 2 = 8 animals.", "8") == 1.0
    assert reward("6 + 2 = 9", "8") == 0.0
    assert fmt("so 8 animals") and not fmt("many animals")
    assert tasks.format_fn("arithmetic") is tasks.format_ok


def test_small_config_builds_word_problem_splits():
    cfg = load_config(ROOT / "config/small.yaml", ["task.n_train=30", "task.n_test=10"])
    assert cfg.tier == "small" and cfg.sft.steps == 0
    assert len(expand_matrix(cfg)) == 42  # 2 algorithms x (bf16 + 3 fp8 variants x 2 granularities) x 3 seeds
    splits = build_splits(cfg)
    assert len(splits["train.jsonl"]) == 30 and len(splits["test.jsonl"]) == 10
    assert splits["tool_test.jsonl"]  # the tool-call benchmark runs on every checkpoint


def test_encode_prompt_uses_a_chat_template_when_there_is_one():
    tok = build_char_tokenizer()
    assert encode_prompt(tok, "12+45=") == tok("12+45=", add_special_tokens=False)["input_ids"]
    tok.chat_template = (
        "{% for m in messages %}q:{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}a:{% endif %}"
    )
    assert tok.decode(encode_prompt(tok, "1+2=")) == "q:1+2=a:"
