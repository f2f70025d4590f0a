"""The task's JSONL splits -> the parquet files verl's RL dataset reads.

verl's `RLHFDataset` reads parquet rows with `prompt` (chat messages), `data_source` (which selects the
rule-based scorer, see `verl_overrides.DATA_SOURCES`), `reward_model.ground_truth` and `extra_info`.
fp8rl's data rows are `{"id", "level", "prompt", "answer"}` (docs/interfaces.md), plus `data_source` for
rows converted from a hub dataset (fp8rl.adapters.math_data), which is kept. The prompt becomes one user
message: verl applies the model's chat template to it.
"""

from __future__ import annotations

from pathlib import Path

from fp8rl.adapters.verl_overrides import DATA_SOURCES


def verl_rows(rows: list[dict], *, task: str, split: str) -> list[dict]:
    """fp8rl data rows -> verl dataset rows."""
    source = DATA_SOURCES.get(task, task)
    out = []
    for i, row in enumerate(rows):
        missing = {"prompt", "answer"} - set(row)
        if missing:
            raise ValueError(f"{split} row {i + 1}: missing {', '.join(sorted(missing))}")
        out.append(
            {
                "data_source": str(row.get("data_source") or source),
                "prompt": [{"role": "user", "content": str(row["prompt"])}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(row["answer"])},
                "extra_info": {"split": split, "index": i, "id": str(row.get("id", i))},
            }
        )
    return out


def write_parquet(jsonl: str | Path, out: str | Path, *, task: str, split: str) -> Path:
    """Convert one split; the parquet file is written to a temp name and renamed."""
    import pandas as pd

    from fp8rl.io import atomic_write, read_jsonl

    rows = verl_rows(read_jsonl(jsonl), task=task, split=split)
    if not rows:
        raise ValueError(f"{jsonl}: no rows")
    df = pd.DataFrame(rows)
    return atomic_write(out, lambda tmp: df.to_parquet(tmp, index=False))
