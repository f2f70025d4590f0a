"""The longform testbed's task (fp8rl.engine.longform): story problems answered with written reasoning,
their verifier and format check."""

from __future__ import annotations

import random
import statistics

import pytest

from fp8rl.engine import longform, tasks


@pytest.fixture(scope="module")
def rows():
    return longform.generate_split(["events2", "events3"], 600, 7, split="train")


def test_rows_are_seeded_distinct_and_their_worked_answers_score_one(rows):
    assert rows == longform.generate_split(["events2", "events3"], 600, 7, split="train")
    assert len({r["prompt"] for r in rows}) == len(rows)
    test = longform.generate_split(["events2"], 50, 7, split="test", exclude={r["prompt"] for r in rows})
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in rows}
    for r in rows:
        assert longform.reward(r["target"], r["answer"]) == 1.0
        assert r["target"].endswith(f"The answer is {r['answer']}.")
        assert 1 <= int(r["answer"]) <= 99
    assert tasks.split_generator("longform") is longform.generate_split
    assert tasks.reward_fn("longform")(rows[0]["target"], rows[0]["answer"]) == 1.0


def test_worked_answers_are_long_and_varied(rows):
    lengths = [len(r["target"].split()) for r in rows]
    assert statistics.mean(lengths) >= 32  # words; the tier config's check counts tokens
    openings = {r["target"].split(" ", 2)[0] for r in rows}
    assert len(openings) >= 3  # phrasings differ between rows: choices left to sample


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace("The answer is", "The answr is"), "a word outside the task's words"),
        (lambda t: t.replace(" = ", " qzx = ", 1), "a nonsense word"),
        (lambda t: t.rsplit(" The answer", 1)[0], "no closing sentence"),
        (lambda t: t + " apples apples", "text after the closing sentence"),
        (lambda t: t.replace(".", "", 1), "a sentence without its full stop"),
        (lambda t: " ".join(s for s in t.split(". ") if "=" not in s), "no equation"),
        (lambda t: t.replace(" ", "  ", 1), "a double space"),
        (lambda t: "", "nothing"),
    ],
)
def test_the_format_check_refuses_broken_text(rows, edit, why):
    broken = edit(rows[0]["target"])
    assert not longform.format_ok(broken), why
    assert longform.reward(broken, rows[0]["answer"]) == 0.0


def test_the_reward_needs_the_right_final_number(rows):
    r = rows[1]
    wrong = r["target"].replace(f"The answer is {r['answer']}.", f"The answer is {int(r['answer']) + 1}.")
    assert longform.format_ok(wrong) and longform.reward(wrong, r["answer"]) == 0.0
    assert longform.reward(" " + r["target"] + "\n", r["answer"]) == 1.0  # surrounding whitespace


def test_running_totals_stay_in_range():
    rng = random.Random(0)
    for _ in range(2000):
        _, answer, work = longform.draw(rng, 4)
        totals = [int(x) for x in __import__("re").findall(r"= (\d+)", work)]
        assert all(1 <= t <= 99 for t in totals) and totals[-1] == answer


def test_unknown_levels_are_named():
    with pytest.raises(ValueError, match=r"task\.levels: unknown longform level events9; allowed: events2"):
        longform.check_levels(["events2", "events9"])
