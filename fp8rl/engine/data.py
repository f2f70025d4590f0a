"""`fp8rl data`: write a tier's task splits (docs/interfaces.md) deterministically from `task.seed`.

Files in the output directory: `train.jsonl` and `test.jsonl` (rows `id`, `level`, `prompt`, `answer`;
no test prompt occurs in train), `tool_test.jsonl` (function-calling rows `id`, `prompt`, `call`) and
`tool_train.jsonl` (the same format, for the SFT warm start; disjoint from the test prompts; not for the
tasks of `NO_TOOL_SFT`), plus
`data.json` with the counts and the config digest of the task section. The task (`task.name`):
`arithmetic` (generated, fp8rl.engine.tasks), `word_problems` (generated math word problems,
fp8rl.engine.word_problems; rows add a gsm8k-style `solution`), `longform` (story problems with written
reasoning, fp8rl.engine.longform; rows add the worked answer as `target`), or `gsm8k` (the hub's
`openai/gsm8k`, `main` config, through the `datasets` cache: needs hub access once; `n_train`/`n_test`
first rows of its train/test splits). With `task.tokenizer` set, also `tokenizer/`: the subword tokenizer
trained on the training rows plus filler text (fp8rl.engine.bpe_tokenizer), recorded in `data.json`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from fp8rl.config import ExperimentConfig
from fp8rl.engine import tasks
from fp8rl.io import atomic_write_json, atomic_write_jsonl, read_jsonl_lines
from fp8rl.vocabulary import REFERENCE_TASKS

DATA_TASKS = REFERENCE_TASKS  # the tasks this module builds rows for
GSM8K = ("openai/gsm8k", "main")
# Tasks whose SFT learns the task alone: no `tool_train.jsonl` (the char tiers' SFT spends a fifth of its
# batches on the agent benchmark's `calc(...)` calls; the longform testbed runs no agent benchmark).
NO_TOOL_SFT = ("longform",)


def gsm8k_rows(split: str, n: int) -> list[dict]:
    """The first `n` rows of gsm8k's `split` as task rows (the answer: the number after `####`)."""
    from datasets import load_dataset

    ds = load_dataset(*GSM8K, split=split)
    rows = []
    for i, ex in enumerate(ds.select(range(min(n, len(ds))))):
        answer = ex["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
        rows.append(
            {"id": f"gsm8k-{split}-{i:05d}", "level": "gsm8k", "prompt": ex["question"], "answer": answer,
             "solution": ex["answer"]}
        )  # fmt: skip
    return rows


def build_splits(cfg: ExperimentConfig) -> dict[str, list[dict]]:
    """The four splits of the config's task as lists of rows."""
    t = cfg.task
    if t.name not in DATA_TASKS:
        raise ValueError(
            f"task.name: the reference trainer has no data for {t.name!r}; known: {', '.join(DATA_TASKS)}"
        )
    if t.name == "gsm8k":
        train, test = gsm8k_rows("train", t.n_train), gsm8k_rows("test", t.n_test)
    else:
        gen = tasks.split_generator(t.name)
        test = gen(t.levels, t.n_test, t.seed, split="test")
        train = gen(t.levels, t.n_train, t.seed, split="train", exclude={r["prompt"] for r in test})
    tool_test = tasks.generate_tool_split(t.n_test, t.seed, split="test")
    test_prompts = {r["prompt"] for r in tool_test}
    splits = {"train.jsonl": train, "test.jsonl": test, "tool_test.jsonl": tool_test}
    if t.name in NO_TOOL_SFT:
        return splits
    splits["tool_train.jsonl"] = [
        r
        for r in tasks.generate_tool_split(max(t.n_train // 4, 1), t.seed, split="train")
        if r["prompt"] not in test_prompts
    ]
    return splits


def task_digest(cfg: ExperimentConfig) -> str:
    blob = json.dumps(cfg.task.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_data(cfg: ExperimentConfig, out_dir: str | Path) -> dict:
    """Write the splits and `data.json` into `out_dir`; returns the `data.json` content."""
    out_dir = Path(out_dir)
    splits = build_splits(cfg)
    for name, rows in splits.items():
        atomic_write_jsonl(out_dir / name, rows)
    info = {
        "task": cfg.task.model_dump(mode="json"),
        "task_digest": task_digest(cfg),
        "counts": {k: len(v) for k, v in splits.items()},
    }
    if cfg.task.tokenizer is not None:
        from fp8rl.engine.bpe_tokenizer import TOKENIZER_DIR, build_bpe_tokenizer

        tk = cfg.task.tokenizer
        build_bpe_tokenizer(
            splits["train.jsonl"], vocab_size=tk.vocab_size, filler_sentences=tk.filler_sentences,
            seed=cfg.task.seed, out_dir=out_dir / TOKENIZER_DIR,
        )  # fmt: skip
        info["tokenizer"] = {"dir": TOKENIZER_DIR, "vocab_size": tk.vocab_size}
    atomic_write_json(out_dir / "data.json", info)
    return info


# What every row of a split holds (docs/interfaces.md): required string fields, then optional ones.
TASK_FIELDS = (("id", "prompt", "answer"), ("level", "solution", "target"))
TOOL_FIELDS = (("id", "prompt"), ())


def row_problem(row, tool: bool) -> str | None:
    """What is wrong with one data row (None when nothing is): an object with the split's string fields
    (`id`, a non-empty `prompt`, and `answer` for a task row or a `call` object `{"name", "arguments"}`
    for a tool row); optional fields (`level`, `solution`, `target`) strings when present."""
    if not isinstance(row, dict):
        return f"a row must be a JSON object, not {type(row).__name__}"
    required, optional = TOOL_FIELDS if tool else TASK_FIELDS
    for key in required:
        if key not in row:
            return f"no {key!r} field"
        if not isinstance(row[key], str):
            return f"{key!r} must be a string, not {type(row[key]).__name__}"
    if not row["prompt"].strip():
        return "'prompt' is empty"
    for key in optional:
        if key in row and not isinstance(row[key], str):
            return f"{key!r} must be a string, not {type(row[key]).__name__}"
    if tool:
        call = row.get("call")
        if not (
            isinstance(call, dict)
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), dict)
        ):
            return "'call' must be an object with a string 'name' and an object 'arguments'"
    return None


def load_split_lines(data_dir: str | Path, name: str, *, allow_empty: bool = False) -> list[tuple[int, dict]]:
    """One split's rows with their line numbers; ValueError naming the file and line of a line that is
    not UTF-8 or JSON or a row that is not one of the split's (`row_problem`: `tool_*.jsonl` hold tool
    rows), naming the file when it is missing or (unless `allow_empty`) empty."""
    path = Path(data_dir) / name
    if not path.is_file():
        raise ValueError(f"{path}: missing (run `fp8rl data` first)")
    rows = read_jsonl_lines(path)
    for lineno, row in rows:
        if problem := row_problem(row, tool=name.startswith("tool_")):
            raise ValueError(f"{path}:{lineno}: {problem}")
    if not rows and not allow_empty:
        raise ValueError(f"{path}: no rows")
    return rows


def load_split(data_dir: str | Path, name: str) -> list[dict]:
    """Read one split, every row checked (`load_split_lines`); ValueError naming the file (and line)."""
    return [row for _, row in load_split_lines(data_dir, name)]


def length_problem(
    rows: list[tuple[int, dict]], path: str | Path, length: Callable[[dict], int], limit: int, what: str
) -> str | None:
    """`{path}:{line}: ...` for the first row whose `length(row)` (tokens) exceeds `limit`, the model's
    positions; `what` says what was counted. None when every row fits."""
    for lineno, row in rows:
        n = length(row)
        if n > limit:
            return (
                f"{path}:{lineno}: {what} is {n} tokens, more than the model's {limit} positions "
                "(shorten or drop the row, or use a model with a longer context)"
            )
    return None
