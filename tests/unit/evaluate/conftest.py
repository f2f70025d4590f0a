"""Held-out data in the docs/interfaces.md row format, written the way `fp8rl data` writes it."""

import json
import random

import pytest


def arithmetic_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append({"id": f"add2-{i:06d}", "level": "add2", "prompt": f"{a}+{b}=", "answer": str(a + b)})
    return rows


def tool_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        op = "add" if i % 2 == 0 else "sub"
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        sign = "+" if op == "add" else "-"
        rows.append(
            {
                "id": f"tool-{i:06d}",
                "prompt": f"tool:{a}{sign}{b}=",
                "call": {"name": "calc", "arguments": {"op": op, "a": a, "b": b}},
            }
        )
    return rows


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for name, rows in (("test.jsonl", arithmetic_rows(24)), ("tool_test.jsonl", tool_rows(24))):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d
