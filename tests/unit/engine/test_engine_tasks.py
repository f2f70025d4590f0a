"""Arithmetic tasks: deterministic splits, disjoint train/test, verifier, format check, tool calls."""

import pytest

from fp8rl.engine import tasks


def test_splits_are_deterministic_and_disjoint():
    a = tasks.generate_split(["add2", "sub3", "mixed2"], 300, 5, split="test")
    b = tasks.generate_split(["add2", "sub3", "mixed2"], 300, 5, split="test")
    assert a == b
    train = tasks.generate_split(
        ["add2", "sub3", "mixed2"], 500, 5, split="train", exclude={r["prompt"] for r in a}
    )
    assert not {r["prompt"] for r in a} & {r["prompt"] for r in train}
    assert len({r["prompt"] for r in train}) == 500
    assert {r["level"] for r in train} == {"add2", "sub3", "mixed2"}


@pytest.mark.parametrize("level", list(tasks.LEVELS))
def test_answers_are_the_arithmetic(level):
    for row in tasks.generate_split([level], 50, 0, split="x"):
        body = row["prompt"].rstrip("=")
        assert int(row["answer"]) == eval(body)  # noqa: S307 - digits and +/- only


def test_small_level_is_exhausted_then_others_fill():
    rows = tasks.generate_split(["add1", "add2"], 300, 0, split="x")
    assert sum(r["level"] == "add1" for r in rows) == 100  # all 10x10 one-digit sums, no more
    with pytest.raises(ValueError, match="cannot draw"):
        tasks.generate_split(["add1"], 101, 0, split="x")


def test_unknown_level_is_named():
    with pytest.raises(ValueError, match="unknown level add9"):
        tasks.check_levels(["add2", "add9"])


@pytest.mark.parametrize(
    ("response", "answer", "reward", "ok"),
    [("57", "57", 1.0, True), (" 57 ", "57", 1.0, True), ("057", "57", 1.0, True), ("-3", "-3", 1.0, True),
     ("58", "57", 0.0, True), ("5 7", "57", 0.0, False), ("57+", "57", 0.0, False), ("", "57", 0.0, False)],
)  # fmt: skip
def test_reward_and_format(response, answer, reward, ok):
    assert tasks.reward(response, answer) == reward
    assert tasks.format_ok(response) is ok


def test_tool_calls_round_trip():
    rows = tasks.generate_tool_split(20, 3, split="test")
    for row in rows:
        text = tasks.sft_target(row)
        assert tasks.parse_call(text) == row["call"]
        a, b = row["call"]["arguments"]["a"], row["call"]["arguments"]["b"]
        sign = "+" if row["call"]["arguments"]["op"] == "add" else "-"
        assert row["prompt"] == f"tool:{a}{sign}{b}="
    assert tasks.parse_call("calc(add,1)") is None
    assert tasks.parse_call("calc(pow,1,2)") is None


def test_math_answers_are_checked_by_math_verify():
    assert tasks.math_reward("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5") == 1.0
    assert tasks.math_reward("\\boxed{3}", "4") == 0.0
    assert tasks.math_reward("no idea", "4") == 0.0
    assert tasks.reward_fn("arithmetic") is tasks.reward and tasks.reward_fn("math") is tasks.math_reward
    with pytest.raises(ValueError, match="no verifier for 'poetry'"):
        tasks.reward_fn("poetry")


@pytest.mark.parametrize("level", list(tasks.LEVELS))
def test_longest_prompt_and_answer_bound_every_drawn_problem(level):
    rows = tasks.generate_split([level], 80, seed=3, split="train")
    lv = tasks.LEVELS[level]
    assert max(len(r["prompt"]) for r in rows) <= lv.longest_prompt
    assert max(len(r["answer"]) for r in rows) <= lv.longest_answer
    tool = tasks.generate_tool_split(200, seed=3, split="train")
    longest_tool = max(len(r["prompt"]) + len(tasks.format_call(r["call"])) + 1 for r in tool)
    assert longest_tool <= tasks.TOOL_EXAMPLE_TOKENS


def test_chain_of_thought_level():
    """cot5: a trace of running totals whose last result is the answer; reward reads the final answer."""
    from fp8rl.engine import tasks as t

    rows = t.generate_split(["cot5"], 300, 3, split="train")
    for r in rows:
        assert t.sft_target(r) == r["target"] and t.reward(r["target"], r["answer"]) == 1.0
        assert 30 <= len(r["target"]) + 1 <= t.LEVELS["cot5"].longest_answer + 1
        assert r["target"].count(",") == 3  # four written steps
    assert t.chain_trace("12+45-30") == "12+45=57,57-30=27" and t.eval_chain("12+45-30") == [57, 27]
    trace = "12+45=57,57-30=27,27+77=104,104-56=48"
    assert t.extract_answer(trace) == "48" and t.reward(trace, "48") == 1.0
    assert t.reward("12+45=57,57-30=27,27+77=104,104-56=49", "48") == 0.0  # wrong final answer
    assert t.reward("12+45=57,57-30=27,", "27") == 0.0 and not t.format_ok("12+45=57,57-30=27,")
    assert t.reward("48", "48") == 1.0  # a bare integer still answers
    assert t.positions_needed(["cot5"], 52) == len("99+99+99+99+99=") + 52
