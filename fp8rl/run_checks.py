"""Does a run directory agree with itself? The checks that keep a damaged run from passing as a good one.

Whose is it (`owner_problems`): `run.json`, `summary.json` and `checkpoint/state.json` name the run id
they belong to; a directory copied or trained into from another run names another one. The report
counts such a run as missing (a copy must not count as a second seed), and `fp8rl train` refuses the
directory (two runs' files never mix).

Two readers need the other checks:

- the report (fp8rl.report.load): `summary_problems` checks the types of `summary.json`, and
  `history_problems` checks `metrics.jsonl` against it: steps 1..N, strictly increasing, no step
  twice; the summary's `step` is the last step written (a diverged run may stop one step past it, or,
  through verl, be detected before it); the summary's `final` metrics are the last row's. A run that
  fails them is not counted as a result. `nonfinite_problems` names a NaN or inf in a run that says
  `ok` (the trainer would have ended it as `diverged`): the step is left out, and the report says so;
- `fp8rl train` before it resumes (`resume_problem`): the checkpoint remembers how many bytes of
  `metrics.jsonl` it had written; if that history is gone or damaged, resuming would silently lose it
  (or crash at the end, leaving no `summary.json`), so the command refuses and says what to do.

The file formats are those of fp8rl.run_files, fp8rl.run_records and docs/interfaces.md.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any

from fp8rl.io import is_number, loads_json
from fp8rl.run_files import CHECKPOINT_STATE_FILE, SUMMARY_FILE, RunDir
from fp8rl.run_records import STATUSES

AFRESH = "delete the run directory {root} to start the run afresh"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ---------------------------------------------------------------------------------- whose is it


def owner_problems(run: RunDir, run_id: str) -> list[str]:
    """One line per file of the run directory that names a run id other than `run_id`: `run.json`,
    `summary.json`, `checkpoint/state.json` (absent files name none; unreadable ones are left to the
    other checks)."""
    out = []
    for path in (run.run_file, run.summary, run.checkpoint / CHECKPOINT_STATE_FILE):
        try:
            obj = loads_json(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict) and obj.get("run_id") != run_id:
            out.append(f"{path}: belongs to run {obj.get('run_id')!r}, not {run_id!r}")
    return out


# ------------------------------------------------------------------------------------- the report


def summary_problems(summary: dict) -> list[str]:
    """What is wrong with the types of a `summary.json` object (empty when nothing is): `status` one of
    the statuses, `reason` a string or null, `step` and `steps_planned` non-negative integers, `final` an
    object of numbers (or nulls)."""
    out = []
    if summary.get("status") not in STATUSES:
        out.append(f"status {summary.get('status')!r} is not one of {', '.join(STATUSES)}")
    if not (summary.get("reason") is None or isinstance(summary.get("reason"), str)):
        out.append(f"reason {summary.get('reason')!r} is not a string or null")
    for key in ("step", "steps_planned"):
        if not (_is_int(summary.get(key)) and summary[key] >= 0):
            out.append(f"{key} {summary.get(key)!r} is not a non-negative integer")
    final = summary.get("final")
    if not isinstance(final, dict):
        out.append(f"final {final!r} is not an object")
    else:
        bad = [k for k, v in final.items() if v is not None and not is_number(v)]
        if bad:
            out.append(f"final has non-numeric values for {', '.join(map(repr, bad))}")
    return out


def _same(a: Any, b: Any) -> bool:
    if not (is_number(a) and is_number(b)):
        return a == b
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def history_problems(summary: dict, rows: list[dict], skipped: int = 0) -> list[str]:
    """How `metrics.jsonl`'s rows (in file order, each with an integer `step`) contradict a type-checked
    `summary.json` (empty when they agree). `skipped`: lines the reader left out as malformed; that
    many steps may be absent without a word (they are counted as malformed already)."""
    steps = [int(r["step"]) for r in rows]
    out = []
    twice = sorted(s for s, n in Counter(steps).items() if n > 1)
    if twice:
        out.append(f"{'steps' if len(twice) > 1 else 'step'} {_listed(twice)} written more than once")
    back = next(((a, b) for a, b in zip(steps, steps[1:], strict=False) if b < a), None)
    if back:
        out.append(f"steps out of order: {back[1]} after {back[0]}")
    last = steps[-1] if steps else 0
    if steps and min(steps) < 1:
        out.append(f"step {min(steps)} is not a step (steps count from 1)")
    absent, n_absent = _absent(steps)
    if n_absent > skipped:
        out.append(f"{'steps' if n_absent > 1 else 'step'} {_listed(absent, total=n_absent)} missing")
    step, status = summary["step"], summary["status"]
    # the reference trainer's diverged run stops at the step that went non-finite, which it never writes;
    # verl's divergence is detected on the imported log, at or before its last step
    fits = last >= step - 1 if status == "diverged" else last == step
    if not fits:
        where = f"ends at step {last}" if steps else "has no steps"
        out.append(f"{SUMMARY_FILE} says step {step} ({status}) but the metrics {where}")
    final = summary["final"]
    if final and rows:
        differ = [k for k, v in final.items() if v is not None and not _same(v, rows[-1].get(k))]
        if differ:
            shown = ", ".join(f"{k} {final[k]!r} vs {rows[-1].get(k)!r}" for k in differ[:3])
            out.append(f"{SUMMARY_FILE}'s final metrics differ from the last step ({last}): {shown}")
    elif final and any(v is not None for v in final.values()):
        out.append(f"{SUMMARY_FILE} has final metrics but the metrics have no steps")
    return out


def nonfinite_problems(summary: dict, rows: list[dict], most: int = 3) -> list[str]:
    """The non-finite metric values of a run whose `summary.json` says `ok` (at most `most` named, then a
    count): the trainer ends a run that goes non-finite as `diverged`, and writes no value that does not
    apply, so an ok run's NaN is damage, and the curves and means that skip it must say so."""
    if summary.get("status") != "ok":
        return []
    found = [
        f"step {r['step']}: {k} is {v}"
        for r in rows
        for k, v in r.items()
        if k != "step" and isinstance(v, float) and not math.isfinite(v)
    ]
    if not found:
        return []
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return [
        f"{'; '.join(found[:most])}{more}, though {SUMMARY_FILE} says ok; left out of the curves and means"
    ]


def _absent(steps: list[int], most: int = 5) -> tuple[list[int], int]:
    """The first `most` steps of 1..max(steps) that `steps` lacks, and how many it lacks, without listing
    them all (a line claiming step 10^8 must not build a set of 10^8 steps)."""
    present = sorted({s for s in steps if s >= 1})
    first, expected = [], 1
    for s in present:
        first += range(expected, min(s, expected + most - len(first)))
        expected = s + 1
    return first, (present[-1] - len(present) if present else 0)


def _listed(steps: list[int], most: int = 5, total: int | None = None) -> str:
    total = len(steps) if total is None else total
    head = ", ".join(map(str, steps[:most]))
    return head + (f" (+{total - most} more)" if total > most else "")


# ------------------------------------------------------------------------------------ resuming


def resume_problem(run: RunDir, meta: dict) -> str | None:
    """Why a run directory cannot resume from its (verified) checkpoint, whose `state.json` is `meta`, or
    None. The checkpoint recorded `step` and `metrics_offset`, the bytes of metrics.jsonl written by
    then; those bytes must still be there and hold steps 1..step, one JSON object each. Bytes past the
    offset (a line cut by a kill) are not checked: resuming cuts them off."""
    afresh = AFRESH.format(root=run.root)
    ckpt = run.checkpoint
    step, offset = meta.get("step"), meta.get("metrics_offset")
    if not (_is_int(step) and step >= 0 and _is_int(offset) and offset >= 0):
        return f"{ckpt}: state.json lacks a valid step and metrics_offset; {afresh}"
    if run.metrics.is_symlink():
        return (
            f"{run.metrics}: a symbolic link (to {os.readlink(run.metrics)}); a resume would append to the "
            f"file it points to; {afresh}"
        )
    if not run.metrics.is_file():
        if offset == 0:
            return None
        return (
            f"{run.metrics}: missing, but the checkpoint in {ckpt} was saved after step {step}; resuming "
            f"would continue the run without its first {step} steps' metrics; {afresh}"
        )
    size = run.metrics.stat().st_size
    if size < offset:
        return (
            f"{run.metrics}: {size} bytes, shorter than the {offset} bytes written by step {step} (the "
            f"checkpoint in {ckpt}); the run's history is damaged; {afresh}"
        )
    with open(run.metrics, "rb") as fh:
        kept = fh.read(offset)
    for lineno, line in enumerate(kept.split(b"\n"), start=1):
        if lineno > step:
            if line.strip():
                return f"{run.metrics}:{lineno}: more lines than the {step} steps of the checkpoint; {afresh}"
            continue
        try:
            obj = loads_json(line)
        except ValueError:  # not UTF-8, not JSON
            obj = None
        if not isinstance(obj, dict) or obj.get("step") != lineno or not _is_int(obj.get("step")):
            return (
                f"{run.metrics}:{lineno}: corrupt (expected the JSON record of step {lineno}); "
                f"the run's history is damaged; {afresh}"
            )
    return None
