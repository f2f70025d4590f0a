"""Story problems answered with written reasoning (the `longform` testbed's task, `task.name: longform`).

A person starts with some items and two to four events change the count (buys, finds, gets, wins;
gives, loses, sells, uses). The answer is the count at the end, reached through one written sentence per
step and a closing `The answer is N.`:

| level     | events | prompt (example)                                                            |
|-----------|--------|-----------------------------------------------------------------------------|
| `events2` | 2      | Anna has 23 shells. Then she buys 7 more. Later she gives 5 to Ben. How many shells does Anna have now? |
| `events3` | 3      | ... one more event                                                          |
| `events4` | 4      | ... two more events                                                         |

A worked answer (the row's `target`, what the SFT learns):
`At first Anna has 23 shells. Then after buying 7 more, she has 23 + 7 = 30 shells. Later because Anna
gave 5 to Ben, she keeps 30 - 5 = 25 shells now. The answer is 25.`
Every sentence is composed of slots drawn from several phrasings each (opening; per step the link,
clause, subject, verb and noun phrase), so a model that has learned the task still has real choices to
sample: the testbed needs per-token entropy well above zero at the start of RL, and a sampled token of
the wrong kind is visible in the text.

`format_ok` (the gibberish rate's format check): the response is an answer of the task's grammar
(`GRAMMAR`, built from the slots): an opening sentence, one or more step sentences each stating an
equation `a + b = c` or `a - b = c`, and the closing `The answer is N.`, with the task's names, items and
phrasings, one space between words. The arithmetic is not checked there: a well-formed answer may be
wrong. `reward`: 1.0 for a well-formed response whose `N` is the answer, else 0.0. Running totals stay in
1..99.
"""

from __future__ import annotations

import random
import re

from fp8rl.engine.word_problems import distinct_problems

NAMES = {"Anna": "she", "Ben": "he", "Mia": "she", "Tom": "he", "Sara": "she", "Leo": "he", "Nora": "she",
         "Omar": "he", "Lily": "she", "Max": "he", "Zoe": "she", "Sam": "he"}  # fmt: skip
ITEMS = ("apples", "pencils", "cookies", "stickers", "marbles", "books", "cards", "shells", "coins", "eggs",
         "stamps", "beads")  # fmt: skip
# (present, gerund, past) of each event; `{n}` the amount, `{other}` another person.
GAINS = (
    ("buys {n} more", "buying {n} more", "bought {n} more"),
    ("finds {n} more", "finding {n} more", "found {n} more"),
    ("gets {n} from {other}", "getting {n} from {other}", "got {n} from {other}"),
    ("wins {n} more", "winning {n} more", "won {n} more"),
)
LOSSES = (
    ("gives {n} to {other}", "giving {n} to {other}", "gave {n} to {other}"),
    ("loses {n}", "losing {n}", "lost {n}"),
    ("sells {n}", "selling {n}", "sold {n}"),
    ("uses {n}", "using {n}", "used {n}"),
)
PROMPT_LINKS = ("Then", "After that", "Later", "Next")
# The slots of a worked answer: an opening, then per event `{link} {clause}, {subject} {verb} {x} ± {n}
# = {y} {noun}.`, then the closing. Every slot's phrasings are drawn uniformly.
OPENINGS = ("{name} starts with {a} {item}.", "At first {name} has {a} {item}.",
            "{name} begins with {a} {item}.", "In the beginning {name} holds {a} {item}.",
            "First, {name} has {a} {item}.", "To start, {name} owns {a} {item}.",
            "{name} has {a} {item} at the start.", "At the start {name} keeps {a} {item}.")  # fmt: skip
LINKS = ("Then", "Next", "Now", "So", "After that", "Later", "And then", "After this")
CLAUSES = ("after {gerund}", "by {gerund}", "once {pron} {past}", "because {pron} {past}",
           "when {pron} {past}", "since {pron} {past}")  # fmt: skip
SUBJECTS = ("{pron}", "{name}")
VERBS = ("has", "holds", "keeps", "counts", "owns", "now has")
NOUNS = ("{item}", "{item} in total", "{item} now", "of them", "{item} in all", "{item} altogether")
CLOSING = "The answer is {y}."
LEVELS = {"events2": 2, "events3": 3, "events4": 4}


def _alternatives(options, **fill: str) -> str:
    """A regex group matching any of `options`, each `{key}` in them standing for the pattern `fill[key]`."""

    def one(text: str) -> str:
        parts = re.split(r"\{(\w+)\}", text)
        return "".join(re.escape(part) if i % 2 == 0 else fill[part] for i, part in enumerate(parts))

    return "(?:" + "|".join(one(o) for o in options) + ")"


def _grammar() -> re.Pattern:
    """The well-formed answers: an opening, one or more step sentences, the closing (module docstring)."""
    name, num, item = _alternatives(NAMES), r"\d+", _alternatives(ITEMS)
    pron = _alternatives(sorted(set(NAMES.values())))
    events = [*GAINS, *LOSSES]
    gerund = _alternatives([e[1] for e in events], n=num, other=name)
    past = _alternatives([e[2] for e in events], n=num, other=name)
    step = (
        _alternatives(LINKS) + " " + _alternatives(CLAUSES, gerund=gerund, past=past, pron=pron) + ", "
        + _alternatives(SUBJECTS, pron=pron, name=name) + " " + _alternatives(VERBS)
        + rf" {num} [+-] {num} = {num} " + _alternatives(NOUNS, item=item) + r"\."
    )  # fmt: skip
    opening = _alternatives(OPENINGS, name=name, a=num, item=item)
    return re.compile(rf"{opening}(?: {step})+ The answer is ({num})\.")


GRAMMAR = _grammar()


def check_levels(levels: list[str]) -> None:
    """ValueError naming the unknown level(s) and the allowed ones."""
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(
            f"task.levels: unknown longform level {', '.join(bad)}; allowed: {', '.join(LEVELS)}"
        )


def _events(rng: random.Random, k: int, start: int) -> list[tuple[bool, int]]:
    """`k` (gain?, amount) events whose running total stays in 1..99."""
    out, total = [], start
    for _ in range(k):
        gain = total < 12 or (total <= 87 and rng.random() < 0.5)
        n = rng.randint(2, min(19, 99 - total)) if gain else rng.randint(2, min(19, total - 1))
        total += n if gain else -n
        out.append((gain, n))
    return out


def draw(rng: random.Random, k: int) -> tuple[str, int, str]:
    """One problem with `k` events: (prompt, answer, worked answer)."""
    name = rng.choice(list(NAMES))
    pron = NAMES[name]
    other = rng.choice([n for n in NAMES if n != name])
    item = rng.choice(ITEMS)
    start = rng.randint(10, 60)
    events = _events(rng, k, start)
    prompt = [f"{name} has {start} {item}."]
    work = [rng.choice(OPENINGS).format(name=name, a=start, item=item)]
    total = start
    for gain, n in events:
        present, gerund, past = rng.choice(GAINS) if gain else rng.choice(LOSSES)
        fill = {"n": n, "other": other}
        prompt.append(f"{rng.choice(PROMPT_LINKS)} {pron} {present.format(**fill)}.")
        new = total + n if gain else total - n
        clause = rng.choice(CLAUSES).format(gerund=gerund.format(**fill), past=past.format(**fill), pron=pron)
        subject = rng.choice(SUBJECTS).format(pron=pron, name=name)
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS).format(item=item)
        op = "+" if gain else "-"
        work.append(f"{rng.choice(LINKS)} {clause}, {subject} {verb} {total} {op} {n} = {new} {noun}.")
        total = new
    prompt.append(f"How many {item} does {name} have now?")
    work.append(CLOSING.format(y=total))
    return " ".join(prompt), total, " ".join(work)


def generate_split(
    levels: list[str], n: int, seed: int, *, split: str, exclude: set[str] = frozenset()
) -> list[dict]:
    """`n` distinct problems cycling through `levels`, from a seed; rows `id`, `level`, `prompt`, `answer`
    and `target` (the worked answer). Prompts in `exclude` (another split's) are skipped. ValueError when
    the templates cannot give `n` distinct problems."""
    check_levels(levels)
    rng = random.Random(f"{seed}:longform:{split}")
    problems = distinct_problems(
        levels, n, rng, lambda r, level: draw(r, LEVELS[level]), f"{split} longform problems", exclude
    )
    return [
        {"id": f"{level}-{i:06d}", "level": level, "prompt": prompt, "answer": str(answer), "target": work}
        for i, (level, prompt, answer, work) in enumerate(problems)
    ]


def extract_answer(response: str) -> str | None:
    """The `N` of a well-formed response's closing `The answer is N.` (`GRAMMAR`), else None."""
    m = GRAMMAR.fullmatch(response.strip())
    return m.group(1) if m else None


def format_ok(response: str) -> bool:
    """Whether a response is a well-formed worked answer ending in `The answer is N.` (module docstring)."""
    return extract_answer(response) is not None


def reward(response: str, answer: str) -> float:
    """1.0 for a well-formed response whose stated answer equals `answer`, else 0.0."""
    got = extract_answer(response)
    return 1.0 if got is not None and int(got) == int(answer) else 0.0
