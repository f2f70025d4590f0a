"""Math word problems with a final numeric answer (the `small` tier's offline task, `task.name:
word_problems`): templated, seeded, with disjoint train/test splits.

Each level is a family of English templates filled with names, objects and small numbers:

| level      | example                                                                  | answer |
|------------|--------------------------------------------------------------------------|--------|
| `add`      | There are 6 cats and 2 dogs. How many animals are there in total?             | `8` |
| `sub`      | Anna had 9 cookies and ate 3 of them. How many cookies does Anna have left?   | `6` |
| `mul`      | Ben buys 4 bags with 5 apples in each bag. How many apples does Ben have?      | `20` |
| `two_step` | Mia has 7 pens. She buys 5 more and gives 4 to a friend. How many pens does Mia have now? | `8` |

Rows are those of every task split (docs/interfaces.md: `id`, `level`, `prompt`, `answer`), plus
`solution` (a worked answer ending in gsm8k's `#### <answer>` line, what a gsm8k-style lm-eval task
extracts). The verifier is `math_verify` (fp8rl.engine.tasks.math_reward): a response is right when the
last number it states equals the answer; `tasks.has_number` is the format check (the gibberish rate's).
"""

from __future__ import annotations

import random
from collections.abc import Callable

NAMES = ("Anna", "Ben", "Mia", "Tom", "Sara", "Leo", "Nora", "Omar", "Lily", "Max", "Zoe", "Sam")
ITEMS = ("apples", "pencils", "cookies", "stickers", "marbles", "books", "cards", "shells", "coins", "eggs")
ANIMALS = (("cats", "dogs"), ("ducks", "geese"), ("cows", "sheep"), ("birds", "rabbits"))

Draw = Callable[[random.Random], tuple[str, int, str]]


def _add(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    if rng.random() < 0.5:
        x, y = rng.choice(ANIMALS)
        q = f"There are {a} {x} and {b} {y}. How many animals are there in total?"
    else:
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        q = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
    return q, a + b, f"{a} + {b} = {a + b}"


def _sub(rng: random.Random) -> tuple[str, int, str]:
    a = rng.randint(5, 30)
    b = rng.randint(1, a - 1)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    q = f"{name} had {a} {item} and gave away {b} of them. How many {item} does {name} have left?"
    return q, a - b, f"{a} - {b} = {a - b}"


def _mul(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    q = f"{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} have?"
    return q, a * b, f"{a} * {b} = {a * b}"


def _two_step(rng: random.Random) -> tuple[str, int, str]:
    a, b = rng.randint(3, 20), rng.randint(2, 10)
    c = rng.randint(1, a + b - 1)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    q = (
        f"{name} has {a} {item}. {name} buys {b} more and then gives {c} to a friend. "
        f"How many {item} does {name} have now?"
    )
    return q, a + b - c, f"{a} + {b} = {a + b}, {a + b} - {c} = {a + b - c}"


LEVELS: dict[str, Draw] = {"add": _add, "sub": _sub, "mul": _mul, "two_step": _two_step}


def check_levels(levels: list[str]) -> None:
    """ValueError naming the unknown level(s) and the allowed ones."""
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(
            f"task.levels: unknown word-problem level {', '.join(bad)}; allowed: {', '.join(LEVELS)}"
        )


def distinct_problems(
    levels: list[str], n: int, rng: random.Random, draw: Callable, what: str, exclude: set[str] = frozenset()
) -> list[tuple[str, str, int, str]]:
    """`n` problems `(level, question, answer, work)` cycling through `levels`, each from `draw(rng,
    level)`, skipping a question already drawn or in `exclude` (another split's). ValueError naming
    `what` when the templates cannot give `n` distinct ones."""
    out: list[tuple[str, str, int, str]] = []
    seen = set(exclude)
    misses = 0
    while len(out) < n:
        level = levels[len(out) % len(levels)]
        question, answer, work = draw(rng, level)
        if question in seen:
            misses += 1
            if misses > 1000 + 10 * n:
                raise ValueError(f"cannot draw {n} distinct {what} from levels {levels}")
            continue
        seen.add(question)
        out.append((level, question, answer, work))
    return out


def generate_split(
    levels: list[str], n: int, seed: int, *, split: str, exclude: set[str] = frozenset()
) -> list[dict]:
    """`n` distinct problems cycling through `levels`, from a seed; prompts in `exclude` (another
    split's) are skipped, so test problems never appear in training. ValueError when the templates
    cannot give `n` distinct problems."""
    check_levels(levels)
    rng = random.Random(f"{seed}:words:{split}")
    problems = distinct_problems(
        levels, n, rng, lambda r, level: LEVELS[level](r), f"{split} word problems", exclude
    )
    return [
        {
            "id": f"{level}-{i:06d}",
            "level": level,
            "prompt": question,
            "answer": str(answer),
            "solution": f"{work}\n#### {answer}",
        }
        for i, (level, question, answer, work) in enumerate(problems)
    ]
