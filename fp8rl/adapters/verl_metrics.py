"""verl's logged metrics -> fp8rl's `metrics.jsonl` (docs/architecture.md#metrics) and the run's `summary.json`.

verl's file logger (`trainer.logger` with `file`, path from `VERL_FILE_LOGGER_PATH`) writes one line per
step: `{"step": N, "data": {name: value}}`. `import_rows` renames verl's metrics to fp8rl's metric names (`VERL_TO_FP8RL`),
keeps the ones fp8rl's own losses already log under fp8rl's metric names (with or without verl's `actor/` prefix),
and drops everything else. A metric verl did not log is absent, never 0; one logged as NaN/inf is absent
from `metrics.jsonl` (strict JSON) but reaches the run's status (`import_rows(keep_non_finite=True)`):
verl's own computations train through a NaN, so a non-finite entropy, reward, policy loss or gradient
norm (`NON_FINITE_WATCH`) is the run's divergence, as in the reference trainer. verl 0.9.1's file logger
writes with orjson, which serializes NaN and inf as `null`: a metric logged as `null` is read as NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from fp8rl.config import STEPS_MAX
from fp8rl.io import is_number
from fp8rl.vocabulary import (
    ACC_MEAN,
    CALIB_FLOOR_BINDS,
    CALIB_HIGH,
    CALIB_LOW,
    CLIP_METRICS,
    MISMATCH_KL_K1,
    MISMATCH_KL_K3,
    RESP_LEN_MEAN,
    REWARD_MEAN,
)

# verl name -> docs/architecture.md#metrics name. Directions checked against verl's rollout_corr_helper:
# `kl` = mean(rollout - old) and `k3_kl` = mean(exp(old - rollout) - (old - rollout) - 1), the same
# estimators as fp8rl.rl.mismatch_kl(trainer=old, rollout=rollout).
VERL_TO_FP8RL = {
    "critic/score/mean": REWARD_MEAN,
    "actor/entropy": "entropy",
    "response_length/mean": RESP_LEN_MEAN,
    "rollout_corr/kl": MISMATCH_KL_K1,
    "rollout_corr/k3_kl": MISMATCH_KL_K3,
    "rollout_corr/rollout_is_mean": "tis/mean",
    "rollout_corr/rollout_is_ratio_fraction_high": "tis/clipped",
    "timing_s/gen": "time/rollout_s",
    "timing_s/old_log_prob": "time/logprob_s",
    "timing_s/update_actor": "time/train_s",
}

# verl's metrics whose NaN/inf is a divergence (`non_finite`) though fp8rl imports no value of them.
NON_FINITE_WATCH = ("actor/pg_loss", "actor/grad_norm")

# Metric names that fp8rl's verl losses (verl_loss) log themselves.
PASSTHROUGH = (
    ACC_MEAN,
    *CLIP_METRICS,
    CALIB_LOW,
    CALIB_HIGH,
    CALIB_FLOOR_BINDS,
    "calib/target_q",
    "ratio/p01",
    "ratio/p50",
    "ratio/p99",
    "qurl/gap",
    "qurl/low",
    "qurl/high",
)


def _logged(data: dict[str, Any], key: str, keep_non_finite: bool) -> float | None:
    """The number `data` logged under `key` (`_number`); with `keep_non_finite`, NaN for a `null` (how
    orjson, verl's file logger's serializer, writes NaN and inf)."""
    if keep_non_finite and key in data and data[key] is None:
        return math.nan
    return _number(data.get(key), keep_non_finite)


def _number(value: Any, keep_non_finite: bool = False) -> float | None:
    """A logged number as a float; None for anything else, and for NaN/inf unless `keep_non_finite`
    (JSON's NaN / Infinity, or the strings "nan" / "inf"; orjson's `null`: `_logged`)."""
    if (
        isinstance(value, str)
        and keep_non_finite
        and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity")
    ):
        return float(value)
    if not is_number(value):  # a bool, a string, or an int no float holds
        return None
    value = float(value)
    return value if math.isfinite(value) or keep_non_finite else None


def convert_row(step: int, data: dict[str, Any], keep_non_finite: bool = False) -> dict[str, float | int]:
    """One verl log row -> one fp8rl metrics row (`step` first, then the metrics present); with
    `keep_non_finite`, NaN/inf values too, and the `NON_FINITE_WATCH` metrics only when non-finite."""
    out: dict[str, float | int] = {"step": int(step)}
    for src, dst in VERL_TO_FP8RL.items():
        if (v := _logged(data, src, keep_non_finite)) is not None:
            out[dst] = v
    for name in PASSTHROUGH:
        for src in (name, f"actor/{name}"):
            if (v := _logged(data, src, keep_non_finite)) is not None:
                out[name] = v
                break
    if keep_non_finite:
        for src in NON_FINITE_WATCH:
            if (v := _logged(data, src, True)) is not None and not math.isfinite(v):
                out[src] = v
    return out


def import_rows(
    rows: Iterable[dict[str, Any]], keep_non_finite: bool = False
) -> list[dict[str, float | int]]:
    """verl file-logger rows -> fp8rl metrics rows, one per step (a step logged twice: the last wins);
    `keep_non_finite`: as `convert_row`."""
    by_step: dict[int, dict[str, float | int]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "step" not in row or not isinstance(row.get("data"), dict):
            raise ValueError(
                f"verl log row {i + 1}: expected {{'step': N, 'data': {{...}}}}, got {str(row)[:80]}"
            )
        step = row["step"]
        # verl logs integer steps; 1.7 and 1.2 must not both become step 1, nor 1e12 a step
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= STEPS_MAX:
            raise ValueError(
                f"verl log row {i + 1}: step {str(step)[:40]} is not a step (an integer from 1 to {STEPS_MAX})"
            )
        by_step.setdefault(step, {}).update(convert_row(step, row["data"], keep_non_finite))
    return [by_step[s] for s in sorted(by_step)]


def import_log(verl_log: str | Path, out: str | Path) -> list[dict[str, float | int]]:
    """Read verl's file-logger JSONL and write fp8rl's `metrics.jsonl` (atomically); returns the rows."""
    return import_logs([verl_log], out)


def read_attempt_log(path: str | Path) -> list[dict[str, Any]]:
    """The rows of one attempt's log. A job killed mid-write leaves its last line cut short (no newline):
    that line is dropped; any other malformed line raises ValueError naming the file and line."""
    from fp8rl.io import read_jsonl

    return read_jsonl(path, drop_cut_tail=True)


def read_attempt_logs(logs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The raw rows of a run's attempts' logs, oldest first."""
    raw: list[dict[str, Any]] = []
    for log in logs:
        raw.extend(read_attempt_log(log))
    return raw


def import_logs(logs: Iterable[str | Path], out: str | Path) -> list[dict[str, float | int]]:
    """Merge the logs of a run's attempts, oldest first, into one `metrics.jsonl`: every step any attempt
    logged, once; a step logged again after a resume (the steps between the last checkpoint and the
    end of the previous attempt are redone) keeps the later attempt's values."""
    from fp8rl.io import atomic_write_jsonl

    rows = import_rows(read_attempt_logs(logs))
    atomic_write_jsonl(out, rows)
    return rows


class VerlRunStatus(NamedTuple):
    """How a verl run ended: `status` (ok | diverged | failed), its `reason`, the last `step` logged, and
    the first `divergence` (`kind`, `step`, `reason`) when one was detected."""

    status: str
    reason: str | None
    step: int
    divergence: dict[str, Any] | None


def run_status(
    rows: list[dict[str, float | int]],
    *,
    steps_planned: int,
    exit_code: int,
    stability: Any,
    recorded: dict[str, Any] | None = None,
) -> VerlRunStatus:
    """How a finished verl run ended. The imported metrics (`import_rows(keep_non_finite=True)`) are
    replayed through fp8rl's `StabilityMonitor` (every detector the reference trainer runs: non-finite,
    entropy spike and collapse, gibberish, reward collapse, on the metrics verl logs; a non-finite
    `NON_FINITE_WATCH` metric is non-finite too), then the divergence fp8rl's loss `recorded` when it
    stopped verl on a non-finite input (fp8rl.adapters.verl_loss; at the step after the last logged):
    `diverged` when one fires; else `failed` when verl exited non-zero or stopped early; else `ok`. verl
    trains through a divergence its metrics show, so `step` is the last step logged and the divergence
    keeps the step it was first detected at."""
    from fp8rl.rl import StabilityMonitor

    monitor = StabilityMonitor.from_config(stability)
    last = int(rows[-1]["step"]) if rows else 0
    for row in rows:
        step = int(row["step"])
        for name in NON_FINITE_WATCH:
            if name in row and not math.isfinite(row[name]):
                monitor.record_non_finite(step, f"{name} = {row[name]}")
        monitor.update(step, {k: float(v) for k, v in row.items() if k not in ("step", *NON_FINITE_WATCH)})
    if recorded is not None:
        monitor.record_non_finite(last + 1, str(recorded.get("what", "non-finite input of the policy loss")))
    if (d := monitor.divergence) is not None:
        return VerlRunStatus("diverged", d.reason, last, d.as_dict())
    if exit_code != 0:
        return VerlRunStatus("failed", f"verl exited with code {exit_code}", last, None)
    if last < steps_planned:
        return VerlRunStatus("failed", f"verl stopped at step {last} of {steps_planned}", last, None)
    return VerlRunStatus("ok", None, last, None)
