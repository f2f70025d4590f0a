"""DAPO-Math-17k (the paper tier's training set) -> fp8rl's data splits, offline from the hub cache.

The dataset (`BytedTsinghua-SIA/DAPO-Math-17k`) is already in verl's RL format: parquet rows with
`data_source` (`math_dapo`, which selects verl's DAPO scorer `verl.utils.reward_score.math_dapo`),
`prompt` (a list of chat messages `{"role", "content"}`: one user turn with the problem and the
instruction to end with `Answer: ...`), `ability`, `reward_model` (`{"ground_truth", "style"}`) and
`extra_info` (`{"index"}`). The published file repeats each of its ~17.4k problems many times, so rows
are deduplicated by prompt text (first occurrence kept), then shuffled with `task.seed`; `task.n_test`
problems are held out as `test.jsonl` (verl's validation file) and up to `task.n_train` of the rest
become `train.jsonl`.

A row of either split: `id`, `level` (`all`), `prompt` (the user message text), `answer` (the ground
truth), `data_source`. `verl_data.verl_rows` turns it back into verl's row; verl applies the model's
chat template to the message itself. `tool_test.jsonl` is empty: the paper tier's agent suite is BFCL,
which brings its own data.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from fp8rl.adapters.hub import TRAIN_DATASETS, read_record
from fp8rl.config import ExperimentConfig

LEVELS = ("all",)
COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def task_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """What the config's backend cannot build, as `(key path, message)` pairs for `load_config(checks=)`:
    a hub training set needs the verl backend and `task.levels: [all]`; the verl backend needs one."""
    from fp8rl.engine.data import DATA_TASKS

    name = cfg.task.name
    if name in DATA_TASKS:
        if cfg.backend == "verl":
            return [
                (
                    ("task", "name"),
                    f"the verl backend trains on {', '.join(TRAIN_DATASETS)}, not {name!r}",
                )
            ]
        return []
    if name not in TRAIN_DATASETS:
        allowed = ", ".join([*DATA_TASKS, *TRAIN_DATASETS])
        return [(("task", "name"), f"unknown task {name!r}; allowed: {allowed}")]
    problems = []
    if cfg.backend != "verl":
        problems.append(
            (("task", "name"), f"{name!r} is trained through verl only (backend: verl); the reference "
             "trainer builds its own tasks (arithmetic, word_problems, gsm8k)")
        )  # fmt: skip
    if list(cfg.task.levels) != list(LEVELS):
        problems.append((("task", "levels"), f"{name!r} has no levels; use [all]"))
    return problems


def _message_text(prompt, where: str) -> str:
    if isinstance(prompt, str):
        return prompt
    messages = [dict(m) for m in prompt] if prompt is not None else []
    users = [m for m in messages if m.get("role") == "user"]
    if len(users) != 1 or not isinstance(users[0].get("content"), str):
        raise ValueError(f"{where}: expected one user message in 'prompt', got {str(messages)[:120]}")
    return users[0]["content"]


def read_rows(snapshot: Path) -> list[dict]:
    """Every parquet row of the dataset snapshot as fp8rl rows (before deduplication)."""
    import pandas as pd

    files = sorted(snapshot.rglob("*.parquet"))
    if not files:
        raise ValueError(f"{snapshot}: no parquet files (is this the DAPO-Math-17k snapshot?)")
    rows = []
    for f in files:
        df = pd.read_parquet(f)
        missing = [c for c in ("prompt", "reward_model") if c not in df.columns]
        if missing:
            raise ValueError(f"{f}: missing column(s) {', '.join(missing)}; columns: {', '.join(df.columns)}")
        for i, rec in enumerate(df.to_dict("records")):
            where = f"{f.name} row {i + 1}"
            rm = rec["reward_model"] or {}
            if "ground_truth" not in rm:
                raise ValueError(f"{where}: reward_model has no ground_truth")
            extra = rec.get("extra_info") or {}
            rows.append(
                {
                    "id": str(extra.get("index", f"{f.stem}-{i}")),
                    "level": "all",
                    "prompt": _message_text(rec["prompt"], where),
                    "answer": str(rm["ground_truth"]),
                    "data_source": str(rec.get("data_source") or "math_dapo"),
                }
            )
    return rows


def dedup(rows: list[dict]) -> list[dict]:
    """Rows with distinct prompt text, first occurrence kept, in input order."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r["prompt"] not in seen:
            seen.add(r["prompt"])
            out.append(r)
    return out


def build_splits(cfg: ExperimentConfig, snapshot: Path) -> dict[str, list[dict]]:
    """`train.jsonl`, `test.jsonl` and an empty `tool_test.jsonl` from the snapshot (module docstring)."""
    t = cfg.task
    rows = dedup(read_rows(snapshot))
    random.Random(f"{t.seed}:{t.name}").shuffle(rows)
    if len(rows) <= t.n_test:
        raise ValueError(f"task.n_test {t.n_test}: the dataset has only {len(rows)} distinct problems")
    test, rest = rows[: t.n_test], rows[t.n_test :]
    return {"train.jsonl": rest[: t.n_train], "test.jsonl": test, "tool_test.jsonl": []}


def write_data(cfg: ExperimentConfig, out_dir: str | Path, hub_record: str | Path) -> dict:
    """Write the splits and `data.json` (counts, the dataset's repository, commit and file hashes)."""
    from fp8rl.io import atomic_write_json, atomic_write_jsonl

    record = read_record(hub_record)
    want = TRAIN_DATASETS[cfg.task.name]
    datasets = record.get("datasets", {})
    if want not in datasets:
        raise ValueError(f"{hub_record}: no snapshot of {want} (fetched: {', '.join(datasets) or 'none'})")
    snap = datasets[want]
    out_dir = Path(out_dir)
    splits = build_splits(cfg, Path(snap["path"]))
    for name, rows in splits.items():
        atomic_write_jsonl(out_dir / name, rows)
    task = cfg.task.model_dump(mode="json")
    info = {
        "task": task,
        "task_digest": hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:16],
        "counts": {k: len(v) for k, v in splits.items()},
        "source": {k: snap[k] for k in ("repo_id", "revision", "files")},
    }
    atomic_write_json(out_dir / "data.json", info)
    return info
