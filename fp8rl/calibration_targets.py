"""A bf16 run's calibration targets: the clip fractions a `calib.reference: run` cell matches, per step.

The bf16 run of the same algorithm, model and seed has finished before the calibrated run starts; its
`metrics.jsonl` holds, per step, the fractions of tokens it clipped under its fixed bounds. The reference
trainer (`fp8rl train --reference`) and the verl backend (fp8rl.adapters.verl_run) both read them through
`reference_targets_by_step`.
"""

from __future__ import annotations

from pathlib import Path

from fp8rl.io import read_jsonl
from fp8rl.run_files import METRICS_FILE
from fp8rl.vocabulary import CLIP_HIGH_ALL, CLIP_HIGH_POS, CLIP_LOW_ALL, CLIP_LOW_NEG


def _target_keys(population: str) -> tuple[str, str]:
    """(lower, upper) clip-fraction metrics of a bf16 run for a calibration population: `all` valid
    tokens (`clip/low_all`, `clip/high_all`) or the A<0 / A>0 ones (`clip/low_neg`, `clip/high_pos`)."""
    return (CLIP_LOW_ALL, CLIP_HIGH_ALL) if population == "all" else (CLIP_LOW_NEG, CLIP_HIGH_POS)


def _reference_rows(run_dir: str | Path) -> tuple[Path, list[dict]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise ValueError(f"{run_dir}: no {METRICS_FILE} (is it a finished bf16 run directory?)")
    return path, read_jsonl(path)


def reference_targets_by_step(run_dir: str | Path, population: str) -> dict[int, tuple[float, float | None]]:
    """Per-step calibration targets from a finished bf16 run (the reference trainer's `calib.reference:
    run`): `{step: (q_low, q_high)}`, the bf16 run's clip fractions under its fixed bounds for
    `population`, `q_high` None where that step did not log it. ValueError naming the file if it is
    missing or no step has `q_low`."""
    path, rows = _reference_rows(run_dir)
    lo_key, hi_key = _target_keys(population)
    out = {}
    for row in rows:
        if "step" in row and lo_key in row:
            out[int(row["step"])] = (float(row[lo_key]), row.get(hi_key))
    if not out:
        raise ValueError(f"{path}: no step records {lo_key!r}; not a usable reference run")
    return out
