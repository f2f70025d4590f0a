"""Synthetic arithmetic tasks: deterministic generation, the verifier reward, the format check, and the
function-calling format that the agent benchmark evaluates.

Levels (`task.levels` in the config):

| level    | prompt          | answer |
|----------|-----------------|--------|
| `add1`   | `3+5=`          | `8`    |
| `add2`   | `12+45=`        | `57`   |
| `add3`   | `123+456=`      | `579`  |
| `sub2`   | `45-12=`        | `33` (may be negative) |
| `sub3`   | `123-456=`      | `-333` |
| `mixed2` | `12+45-30=`     | `27` (two steps) |
| `cot5`   | `12+45-30+77-56=` | `12+45=57,57-30=27,27+77=104,104-56=48` (chain of thought; answer 48) |

`cot5` (the stress tier) is answered through written intermediate steps: one `a±b=c` per operation,
comma-separated, each starting from the previous running total; the number after the last `=` is the
final answer (about 30-50 characters). Its rows carry the trace as `target` (the SFT completion) and the final
integer as `answer`.

The tool format asks for a call instead of the result: prompt `tool:12+45=`, target `calc(add,12,45)`.
A response is the generated text up to `<eos>`; `reward` is 1.0 for an exact integer match with the
answer (for `cot5`, the final result of a well-formed trace), else 0.0; `format_ok` says whether the
response has the level's form at all (the gibberish rate counts the rest). The traces hold plain integers,
for which an exact match is what `math_verify` would decide too. Math answers of larger tiers are
checked with `math_verify` (`math_reward`): the `small` tier's generated word problems (`word_problems`,
fp8rl.engine.word_problems) and `gsm8k`. `reward_fn(task.name)` picks the verifier and
`format_fn(task.name)` the format check. The `longform` testbed's story problems with written reasoning
(fp8rl.engine.longform) bring their own verifier and format check; `split_generator(task.name)` gives a
generated task's row generator.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fp8rl.config import ExperimentConfig

_INT = re.compile(r"-?\d+")
# A chain-of-thought trace: `a+b=c` steps, comma-separated; the final answer follows the last '='.
_TRACE = re.compile(r"-?\d+[+-]\d+=-?\d+(,-?\d+[+-]\d+=-?\d+)*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CALL = re.compile(r"calc\((add|sub|mul),(-?\d+),(-?\d+)\)")
TOOL_OPS = {"add": "+", "sub": "-"}


@dataclass(frozen=True)
class Level:
    """How one difficulty level draws a problem: (prompt body without '=', integer answer), and the
    longest prompt (with its '=') and answer it can draw, in characters (tokens of the char tokenizer)."""

    name: str
    draw: Callable[[random.Random], tuple[str, int]]
    longest_prompt: int
    longest_answer: int
    trace: Callable[[str], str] | None = None  # prompt body -> the written steps (SFT target), if any


def _binary(lo: int, hi: int, op: str) -> Callable[[random.Random], tuple[str, int]]:
    def draw(rng: random.Random) -> tuple[str, int]:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        return f"{a}{op}{b}", a + b if op == "+" else a - b

    return draw


def _two_step(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99)
    return f"{a}+{b}-{c}", a + b - c


def _chain(rng: random.Random) -> tuple[str, int]:
    terms = [rng.randint(10, 99) for _ in range(5)]
    ops = [rng.choice("+-") for _ in range(4)]
    body = str(terms[0]) + "".join(f"{op}{t}" for op, t in zip(ops, terms[1:], strict=True))
    return body, eval_chain(body)[-1]


def eval_chain(body: str) -> list[int]:
    """The running totals of `a±b±c...` evaluated left to right (the last one is the answer)."""
    nums = [int(x) for x in re.findall(r"\d+", body)]
    ops = re.findall(r"(?<=\d)[+-]", body)
    totals, acc = [], nums[0]
    for op, n in zip(ops, nums[1:], strict=True):
        acc = acc + n if op == "+" else acc - n
        totals.append(acc)
    return totals


def chain_trace(body: str) -> str:
    """The written steps of `a±b±c...`: `a±b=t1,t1±c=t2,...`."""
    nums = [int(x) for x in re.findall(r"\d+", body)]
    ops = re.findall(r"(?<=\d)[+-]", body)
    steps, prev = [], nums[0]
    for op, n, total in zip(ops, nums[1:], eval_chain(body), strict=True):
        steps.append(f"{prev}{op}{n}={total}")
        prev = total
    return ",".join(steps)


LEVELS: dict[str, Level] = {
    "add1": Level("add1", _binary(0, 9, "+"), len("9+9="), len("18")),
    "add2": Level("add2", _binary(10, 99, "+"), len("99+99="), len("198")),
    "add3": Level("add3", _binary(100, 999, "+"), len("999+999="), len("1998")),
    "sub2": Level("sub2", _binary(10, 99, "-"), len("99-99="), len("-89")),
    "sub3": Level("sub3", _binary(100, 999, "-"), len("999-999="), len("-899")),
    "mixed2": Level("mixed2", _two_step, len("99+99-99="), len("188")),
    # Longest trace: four steps of `-287-99=-386` shape (4 + 1 + 2 + 1 + 4) and three commas.
    "cot5": Level("cot5", _chain, len("99+99+99+99+99="), 4 * 12 + 3, trace=chain_trace),
}
# The longest function-calling SFT example: prompt `tool:99+99=`, target `calc(add,99,99)`, `<eos>`.
TOOL_EXAMPLE_TOKENS = len("tool:99+99=") + len("calc(add,99,99)") + 1


def check_levels(levels: list[str]) -> None:
    """ValueError naming the unknown level(s) and the allowed ones."""
    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise ValueError(f"task.levels: unknown level {', '.join(bad)}; allowed: {', '.join(LEVELS)}")


def positions_needed(levels: list[str], max_new_tokens: int) -> int:
    """Positions a scratch model needs for the task: a rollout (the longest prompt of `levels` plus
    `max_new_tokens`) and every SFT example (prompt, target and `<eos>`, the tool rows included)."""
    check_levels(levels)
    rollout = max(LEVELS[lv].longest_prompt for lv in levels) + max_new_tokens
    sft = max(LEVELS[lv].longest_prompt + LEVELS[lv].longest_answer + 1 for lv in levels)
    return max(rollout, sft, TOOL_EXAMPLE_TOKENS)


def config_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """What the arithmetic task needs of a config beyond its schema, as `(key path, message)` pairs
    (`load_config(..., checks=[config_problems])` reports them with their lines): known levels, and
    scratch models with enough positions for the longest prompt and answer, and a `task.tokenizer` for a
    scratch model whose tokenizer is `bpe`."""
    for i, model in enumerate(cfg.models):
        if model.source == "scratch" and model.tokenizer == "bpe" and cfg.task.tokenizer is None:
            return [(("models", i, "tokenizer"), "bpe needs task.tokenizer (the data step trains it)")]
    if cfg.task.name in ("word_problems", "longform"):
        try:
            _module(cfg.task.name).check_levels(cfg.task.levels)
        except ValueError as exc:
            return [(("task", "levels"), str(exc).removeprefix("task.levels: "))]
        return []
    if cfg.task.name != "arithmetic":
        return []
    try:
        need = positions_needed(cfg.task.levels, cfg.schedule.max_new_tokens)
    except ValueError as exc:
        return [(("task", "levels"), str(exc).removeprefix("task.levels: "))]
    problems = []
    for i, model in enumerate(cfg.models):
        have = model.arch.max_position_embeddings if model.arch else need
        if model.source == "scratch" and have < need:
            problems.append(
                (
                    ("models", i, "arch", "max_position_embeddings"),
                    f"{have} positions, fewer than the {need} the task needs (the longest prompt of "
                    f"task.levels plus schedule.max_new_tokens {cfg.schedule.max_new_tokens}, or the "
                    "longest SFT example)",
                )
            )
    return problems


def generate_split(
    levels: list[str], n: int, seed: int, *, split: str, exclude: set[str] = frozenset()
) -> list[dict]:
    """`n` distinct problems cycling through `levels`, from a seed; rows as docs/interfaces.md
    (`id`, `level`, `prompt`, `answer`). Prompts in `exclude` (another split's) are skipped, so test
    problems never appear in training."""
    check_levels(levels)
    rng = random.Random(f"{seed}:{split}")
    rows: list[dict] = []
    seen = set(exclude)
    active = list(levels)
    misses = dict.fromkeys(levels, 0)
    turn = 0
    while len(rows) < n:
        if not active:
            raise ValueError(f"cannot draw {n} distinct {split} problems from levels {levels}")
        level = LEVELS[active[turn % len(active)]]
        body, answer = level.draw(rng)
        prompt = body + "="
        if prompt in seen:
            misses[level.name] += 1
            if misses[level.name] > 200:  # this level's problems are used up: keep drawing from the others
                active.remove(level.name)
            continue
        turn += 1
        misses[level.name] = 0
        seen.add(prompt)
        row = {
            "id": f"{level.name}-{len(rows):06d}",
            "level": level.name,
            "prompt": prompt,
            "answer": str(answer),
        }
        if level.trace is not None:
            row["target"] = level.trace(body)
        rows.append(row)
    return rows


def generate_tool_split(n: int, seed: int, *, split: str, digits: tuple[int, int] = (10, 99)) -> list[dict]:
    """Function-calling problems: prompt `tool:a+b=` asks for the call `calc(add,a,b)` (or `sub`)."""
    rng = random.Random(f"{seed}:tool:{split}")
    rows = []
    for i in range(n):
        op = "add" if i % 2 == 0 else "sub"
        a, b = rng.randint(*digits), rng.randint(*digits)
        rows.append(
            {
                "id": f"tool-{i:06d}",
                "prompt": f"tool:{a}{TOOL_OPS[op]}{b}=",
                "call": {"name": "calc", "arguments": {"op": op, "a": a, "b": b}},
            }
        )
    return rows


def format_call(call: dict) -> str:
    """The target text of a tool row: `calc(op,a,b)`."""
    args = call["arguments"]
    return f"{call['name']}({args['op']},{args['a']},{args['b']})"


def parse_call(text: str) -> dict | None:
    """Parse a generated `calc(op,a,b)` call (the whole stripped response); None if it is not one."""
    m = _CALL.fullmatch(text.strip())
    if not m:
        return None
    return {"name": "calc", "arguments": {"op": m.group(1), "a": int(m.group(2)), "b": int(m.group(3))}}


def extract_answer(response: str) -> str | None:
    """The integer a response states: its stripped text if that is an integer, or the number after the
    last '=' of a well-formed chain-of-thought trace; else None."""
    text = response.strip()
    if _INT.fullmatch(text):
        return text
    if _TRACE.fullmatch(text):
        return text.rsplit("=", 1)[1]
    return None


def format_ok(response: str) -> bool:
    """Whether a response has an answer format (one integer, or a well-formed trace, nothing else)."""
    return extract_answer(response) is not None


def reward(response: str, answer: str) -> float:
    """The verifier reward: 1.0 if the response is exactly the answer's integer, else 0.0."""
    got = extract_answer(response)
    return 1.0 if got is not None and int(got) == int(answer) else 0.0


def math_reward(response: str, answer: str) -> float:
    """The verifier of math answers (larger tiers): 1.0 if `math_verify` finds the response's final
    answer (boxed LaTeX or a plain expression) equivalent to `answer`, else 0.0."""
    from math_verify import parse, verify

    gold, pred = parse(answer), parse(response)
    return 1.0 if gold and pred and verify(gold, pred) else 0.0


def has_number(response: str) -> bool:
    """The format check of math tasks: the response states a number somewhere."""
    return _NUMBER.search(response) is not None


def _module(task_name: str):
    """The module of a generated task other than arithmetic (imported when first needed)."""
    if task_name == "longform":
        from fp8rl.engine import longform

        return longform
    from fp8rl.engine import word_problems

    return word_problems


def _longform_reward(response: str, answer: str) -> float:
    return _module("longform").reward(response, answer)


def _longform_format(response: str) -> bool:
    return _module("longform").format_ok(response)


REWARDS: dict[str, Callable[[str, str], float]] = {
    "arithmetic": reward,
    "math": math_reward,
    "word_problems": math_reward,
    "longform": _longform_reward,
    "gsm8k": math_reward,
}
FORMATS: dict[str, Callable[[str], bool]] = {
    "arithmetic": format_ok,
    "math": has_number,
    "word_problems": has_number,
    "longform": _longform_format,
    "gsm8k": has_number,
}


def split_generator(task_name: str) -> Callable[..., list[dict]]:
    """The `generate_split(levels, n, seed, *, split, exclude)` of a generated task (`arithmetic`,
    `word_problems`, `longform`); ValueError naming the known ones."""
    if task_name == "arithmetic":
        return generate_split
    if task_name in ("word_problems", "longform"):
        return _module(task_name).generate_split
    raise ValueError(
        f"task.name: {task_name!r} is not generated; generated: arithmetic, word_problems, longform"
    )


def reward_fn(task_name: str) -> Callable[[str, str], float]:
    """The verifier of a task (`task.name`); ValueError naming the known ones."""
    if task_name not in REWARDS:
        raise ValueError(f"task.name: no verifier for {task_name!r}; known: {', '.join(REWARDS)}")
    return REWARDS[task_name]


def format_fn(task_name: str) -> Callable[[str], bool]:
    """The answer-format check of a task (what the gibberish rate counts as `format`)."""
    if task_name not in FORMATS:
        raise ValueError(f"task.name: no format check for {task_name!r}; known: {', '.join(FORMATS)}")
    return FORMATS[task_name]


def sft_target(row: dict) -> str:
    """The SFT completion of a data row (the trace of a chain-of-thought row, the call of a tool row,
    else the answer), without `<eos>`."""
    if "call" in row:
        return format_call(row["call"])
    return row.get("target", row["answer"])
