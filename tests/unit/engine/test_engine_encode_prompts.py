"""`encode_prompts` (one batched tokenizer call) gives every prompt the ids `encode_prompt` gives it alone:
the char tokenizer, the longform testbed's BPE and a chat-templated tokenizer."""

from __future__ import annotations

import pytest

from fp8rl.engine import longform
from fp8rl.engine.bpe_tokenizer import corpus, train_bpe
from fp8rl.engine.tokenizer import build_char_tokenizer, encode_prompt, encode_prompts


def _check(tokenizer, prompts):
    batched = encode_prompts(tokenizer, prompts)
    assert batched == [encode_prompt(tokenizer, p) for p in prompts]
    assert len({len(ids) for ids in batched}) > 1  # prompts of different lengths: no padding crept in


def test_char_tokenizer():
    _check(build_char_tokenizer(), ["1+2=", "12+45-30+77-56=", "tool:9-3=", ""])


@pytest.fixture(scope="module")
def bpe():
    rows = longform.generate_split(["events2"], 300, 7, split="train")
    return train_bpe(corpus(rows, 2000, 7), 1024), [r["prompt"] for r in rows[:50]]


def test_bpe_tokenizer(bpe):
    tokenizer, prompts = bpe
    _check(tokenizer, prompts)


def test_chat_template_row_by_row(bpe):
    tokenizer, prompts = bpe
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    )
    _check(tokenizer, prompts[:5])


def test_no_prompts():
    assert encode_prompts(build_char_tokenizer(), []) == []
