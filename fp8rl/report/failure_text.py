"""The text at failure: what a diverged run sampled when its detector fired, beside what it sampled at
step 1 (the table `failure_text`, for a tier that logs samples: `schedule.log_samples`).

The paper's failure is an entropy surge with garbled output; a divergence count says that a detector
fired, not what the text looked like. For every run whose status is `diverged` (endpoints.csv's
`div_step`, `div_kind`), the rows of its `samples.jsonl` (the first `schedule.log_samples` samples of
every step, as the trainer wrote them: fp8rl.run_files `RunDir.append_samples`) at step 1 and at the
first logged step at or after the divergence step, `PER_STEP` of each (at the failure, the samples the
gibberish detector judged gibberish first, then the others, each in logged order), the text cut to
`WIDTH` characters. A run whose samples are missing or unreadable gets one row that says so (the report goes
on). No run diverged: the table is empty and its note says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fp8rl.io import read_jsonl
from fp8rl.run_files import RunDir

PER_STEP = 2  # samples shown per step (of those the trainer logged)
WIDTH = 240  # characters of a sample's text shown
COLUMNS = ["run_id", "div_kind", "div_step", "when", "step", "reward", "format_ok", "gibberish", "text"]
NOTES = [
    "Every diverged run's first logged samples at step 1 (`when`: start) and at the first logged step at "
    f"or after its divergence (`when`: failure; those judged gibberish first); {PER_STEP} per step, the "
    f"text cut to {WIDTH} characters "
    "(`…`). `gibberish`: why the gibberish detector judged that sample gibberish (blank: it did not).",
]


def _cut(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= WIDTH else flat[: WIDTH - 1] + "…"


def _rows_at(samples: list[dict], step: int, garbled_first: bool) -> list[dict]:
    """`PER_STEP` samples of the first logged step at or after `step`: the first ones logged, or, with
    `garbled_first`, those the gibberish detector judged gibberish before the others (in logged order)."""
    later = sorted({int(r["step"]) for r in samples if int(r["step"]) >= step})
    if not later:
        return []
    rows = [r for r in samples if int(r["step"]) == later[0]]
    if garbled_first:
        rows = sorted(rows, key=lambda r: not r.get("gibberish"))  # stable: logged order within each
    return rows[:PER_STEP]


def run_failure_text(runs_dir: Path, run_id: str, div_kind: str, div_step: int) -> list[dict]:
    """The rows of one diverged run (module docstring)."""
    head = {"run_id": run_id, "div_kind": div_kind, "div_step": div_step}
    path = RunDir.of(runs_dir, run_id).samples
    try:
        samples = read_jsonl(path)
    except FileNotFoundError:
        return [head | {"when": "", "text": f"(no {path.name}: schedule.log_samples was 0 for this run)"}]
    except ValueError as exc:
        return [head | {"when": "", "text": f"(unreadable: {exc})"}]
    rows = []
    for when, step in (("start", 1), ("failure", div_step)):
        for r in _rows_at(samples, step, garbled_first=when == "failure"):
            rows.append(
                head
                | {
                    "when": when,
                    "step": int(r["step"]),
                    "reward": r.get("reward"),
                    "format_ok": r.get("format_ok"),
                    "gibberish": r.get("gibberish") or "",
                    "text": _cut(r.get("text", "")),
                }
            )
    return rows or [head | {"when": "", "text": f"(no samples at or after step {div_step})"}]


def failure_text_table(endpoints: pd.DataFrame, runs_dir: Path) -> pd.DataFrame:
    """One row per shown sample of every diverged run, in endpoints.csv's run order."""
    diverged = endpoints[endpoints["status"] == "diverged"]
    rows = [
        row
        for run_id, kind, step in zip(
            diverged["run_id"], diverged["div_kind"], diverged["div_step"], strict=True
        )
        for row in run_failure_text(runs_dir, run_id, str(kind), int(step))
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def failure_text_notes(table: pd.DataFrame) -> list[str]:
    """The table's notes, with 'no run diverged' when it is empty."""
    return NOTES + ([] if len(table) else ["No run diverged: there is no text at failure to show."])
