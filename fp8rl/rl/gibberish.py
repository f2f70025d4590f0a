"""Gibberish rate: the share of responses that are malformed or degenerate.

A response counts as gibberish when the task's own format check failed (`format_ok` False, e.g. no
parseable answer), or when it is degenerate text by one of four task-independent heuristics:
- `unprintable`: more than `max_unprintable` of its characters are control characters or U+FFFD
  (broken byte sequences);
- `run`: one character repeated `max_run` times or more in a row ("7777777", "======"), at any length,
  so that short answers are covered too;
- `repetition`: fewer than `min_distinct_ngrams` of the character n-grams of its tail are distinct
  (loops such as "1+1+1+1+...");
- `compression`: zlib compresses its tail below `min_compression_ratio` of its UTF-8 size.
The last two look at the last `window` characters only, because degenerate loops take over the end of a
response and because n-gram and compression statistics of whole texts drift with length. Length floors
keep them off short answers, where the format check and the `run` rule carry the signal.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GibberishRules:
    """Thresholds of the degenerate-text heuristics (see the module docstring)."""

    max_unprintable: float = 0.1
    max_run: int = 6
    window: int = 256
    ngram: int = 8
    repetition_min_len: int = 24
    min_distinct_ngrams: float = 0.3
    compression_min_len: int = 64
    min_compression_ratio: float = 0.2


def _unprintable_share(text: str) -> float:
    bad = sum(1 for c in text if c == "\ufffd" or (not c.isprintable() and c not in "\n\t\r"))
    return bad / len(text)


def _longest_run(text: str) -> int:
    best = cur = 1
    for a, b in zip(text, text[1:], strict=False):
        cur = cur + 1 if a == b else 1
        best = max(best, cur)
    return best


def gibberish_reason(
    text: str, format_ok: bool | None = None, rules: GibberishRules = GibberishRules()
) -> str | None:
    """Why `text` counts as gibberish (`format`, `unprintable`, `run`, `repetition`, `compression`), or
    None."""
    if format_ok is False:
        return "format"
    if not text:
        return None
    if _unprintable_share(text) > rules.max_unprintable:
        return "unprintable"
    if _longest_run(text) >= rules.max_run:
        return "run"
    n = rules.ngram
    text = text[-rules.window :]
    if len(text) >= max(rules.repetition_min_len, n):
        grams = [text[i : i + n] for i in range(len(text) - n + 1)]
        if len(set(grams)) / len(grams) < rules.min_distinct_ngrams:
            return "repetition"
    if len(text) >= rules.compression_min_len:
        raw = text.encode("utf-8", errors="replace")
        if len(zlib.compress(raw, 9)) / len(raw) < rules.min_compression_ratio:
            return "compression"
    return None


def gibberish_rate(
    texts: Sequence[str], format_ok: Sequence[bool] | None = None, rules: GibberishRules = GibberishRules()
) -> float:
    """`gibberish/rate`: the fraction of `texts` for which `gibberish_reason` gives a reason.

    `format_ok[i]` is the task's format check of `texts[i]` (None: heuristics only). ValueError on an
    empty batch or mismatched lengths.
    """
    if len(texts) == 0:
        raise ValueError("gibberish_rate: no texts")
    if format_ok is not None and len(format_ok) != len(texts):
        raise ValueError(f"gibberish_rate: {len(texts)} texts but {len(format_ok)} format_ok flags")
    flags = format_ok if format_ok is not None else [None] * len(texts)
    return sum(gibberish_reason(t, f, rules) is not None for t, f in zip(texts, flags, strict=True)) / len(
        texts
    )
