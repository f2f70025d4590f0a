"""Generated filler text: the non-task part of the corpus the testbed's BPE tokenizer is trained on.

The testbed's task text alone (a few hundred English words and the digits) would give a BPE vocabulary
of a few hundred tokens, all of them task words. A real model's vocabulary is mostly tokens a task never
uses, so that a sampled token can be nonsense. This module writes that part deterministically, with no
dataset: a seeded lexicon of pronounceable pseudo-words (syllables of an onset, a vowel and a coda),
drawn with Zipf frequencies (rank^-1.1, as word counts of natural text fall off) into sentences with
English function words, commas and numbers. Same `seed` and size, same text, on every machine (Python's
`random.Random` seeded by a string is the same across platforms and versions).
"""

from __future__ import annotations

import itertools
import random

ONSETS = ("", "b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "l", "m", "n", "p",
          "pl", "pr", "r", "s", "sh", "sl", "st", "t", "th", "tr", "v", "w", "z")  # fmt: skip
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y")
CODAS = ("", "", "", "l", "m", "n", "r", "s", "t", "nd", "ng", "rk", "st", "x")
FUNCTION_WORDS = ("the", "a", "of", "and", "to", "in", "is", "that", "it", "was", "for", "on", "with",
                  "as", "at", "by", "from", "this", "but", "or", "not", "they", "we", "all", "some",
                  "more", "when", "then", "there", "one", "two", "three")  # fmt: skip
ZIPF_EXPONENT = 1.1


def lexicon(n_words: int, seed: int) -> list[str]:
    """`n_words` distinct pseudo-words of one to four syllables, in a seeded order (the order is their
    frequency rank)."""
    rng = random.Random(f"{seed}:lexicon")
    words: dict[str, None] = {}
    syllables = ["".join(p) for p in itertools.product(ONSETS, VOWELS, CODAS)]
    if n_words <= 0:
        return []
    tries = 0
    while len(words) < n_words:
        tries += 1
        if tries > 100 * n_words:
            raise ValueError(f"filler: cannot draw {n_words} distinct pseudo-words")
        n_syl = rng.choice((1, 2, 2, 3, 3, 4))
        word = "".join(rng.choice(syllables) for _ in range(n_syl))
        if 2 <= len(word) <= 14 and word not in FUNCTION_WORDS:
            words.setdefault(word)
    return list(words)


def filler_sentences(n_sentences: int, seed: int, *, n_words: int = 8000) -> list[str]:
    """`n_sentences` sentences of 5-16 words: Zipf-drawn pseudo-words from a `lexicon(n_words, seed)`
    mixed with function words (about one word in three), an occasional number and comma, the first word
    capitalised, a full stop at the end."""
    words = lexicon(n_words, seed)
    weights = [1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(len(words))]
    cum = list(itertools.accumulate(weights))
    rng = random.Random(f"{seed}:filler")
    out = []
    for _ in range(n_sentences):
        length = rng.randint(5, 16)
        picked = rng.choices(words, cum_weights=cum, k=length)
        sentence = []
        for w in picked:
            r = rng.random()
            if r < 0.33:
                sentence.append(rng.choice(FUNCTION_WORDS))
            elif r < 0.36:
                sentence.append(str(rng.randint(0, 999)))
            sentence.append(w + ("," if rng.random() < 0.06 else ""))
        text = " ".join(sentence).rstrip(",")
        out.append(text[0].upper() + text[1:] + ".")
    return out
