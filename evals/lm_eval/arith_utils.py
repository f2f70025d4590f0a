"""Choices of the arith_mc task: the answer and three near misses, in an order fixed by the row id."""

import random


def near_misses(answer: int, rng: random.Random) -> list[int]:
    """Three wrong answers a model that half-knows arithmetic confuses with the right one."""
    pool = [answer + 1, answer - 1, answer + 10, answer - 10]
    return rng.sample(pool, 3)


def process_docs(dataset):
    def add_choices(doc: dict) -> dict:
        rng = random.Random(doc["id"])
        answer = int(doc["answer"])
        options = [answer, *near_misses(answer, rng)]
        rng.shuffle(options)
        return {"choices": [str(x) for x in options], "gold": options.index(answer)}

    return dataset.map(add_choices)
