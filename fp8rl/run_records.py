"""The two records written when a run ends: `summary.json` (`build_summary`) and `throughput.json`
(`throughput_record`), one schema for the reference trainer and the verl backend alike; docs/interfaces.md
documents them. `STATUSES` are a summary's statuses, `PHASES` the phases a throughput record times.
"""

from __future__ import annotations

from typing import Any

STATUSES = ("ok", "diverged", "failed")
# throughput.json's phases, in report order (time/{phase}_s and tok/{phase} in metrics.jsonl)
PHASES = ("rollout", "logprob", "train", "calib")


def build_summary(
    run_id: str,
    status: str,
    reason: str | None,
    step: int,
    steps_planned: int,
    final: dict[str, Any],
    provenance: dict[str, Any],
    *,
    backend: str | None = None,
    deviations: list | None = None,
    divergence: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
    noise: dict[str, Any] | None = None,
) -> dict:
    """The `summary.json` object of a finished run. `step` is the last step written (for `diverged`,
    the step where it was detected, or the last step trained when the run went on after it); `final` the
    last step's metrics the writer chose to keep. `divergence` (the first divergence: `kind`, `step`,
    `reason`), `backend`, `deviations` (what verl runs differently from the reference trainer) and
    `base` (the base model the run started from: `name` as endpoints.csv's `base`, the `seed` and
    `sft_seed` its `sft.json` recorded) and `noise` (a `fp8.target_kl` run's search: `target_kl`,
    the `noise_scale` it trains at, the mismatch units there; fp8rl.engine.noise_target) are written only
    when given."""
    if status not in STATUSES:
        raise ValueError(f"summary status {status!r} for {run_id}; allowed: {', '.join(STATUSES)}")
    summary = {
        "run_id": run_id,
        "status": status,
        "reason": reason,
        "step": step,
        "steps_planned": steps_planned,
        "final": final,
    }
    if divergence is not None:
        summary["divergence"] = divergence
    if backend is not None:
        summary["backend"] = backend
    if deviations is not None:
        summary["deviations"] = deviations
    if base is not None:
        summary["base"] = base
    if noise is not None:
        summary["noise"] = noise
    summary["provenance"] = provenance
    return summary


def throughput_record(
    rows: list[dict],
    *,
    emulated: bool,
    device: str,
    fp8_backend: str,
    peak_mem_mb: float | None = None,
    threads: int | None = None,
    fp8_gemms: dict[str, int] | None = None,
) -> dict:
    """The `throughput.json` object, from a run's metrics rows and what the writer knows of its machine.

    Per phase of `PHASES` that any row timed (`time/{phase}_s`): `seconds` summed over the rows, and,
    where the rows count tokens (`tok/{phase}`), `tokens` and `tokens_per_s`. `step_time_s` is the mean
    `time/step_s`, or, for a log without it, the phases' seconds over the steps. `peak_mem_mb`,
    `threads` and `fp8_gemms` are written only when given: unknown is absent, never 0.
    """
    phases = {}
    for ph in PHASES:
        if not any(f"time/{ph}_s" in r for r in rows):
            continue  # a phase this run never has (calib in bf16 runs) is absent
        secs = sum(float(r.get(f"time/{ph}_s", 0.0)) for r in rows)
        phases[ph] = {"seconds": round(secs, 4)}
        if any(f"tok/{ph}" in r for r in rows):
            toks = sum(float(r.get(f"tok/{ph}", 0.0)) for r in rows)
            phases[ph] |= {"tokens": int(toks), "tokens_per_s": round(toks / secs, 2) if secs > 0 else None}
    step_times = [float(r["time/step_s"]) for r in rows if "time/step_s" in r]
    if step_times:
        step_time = round(sum(step_times) / len(step_times), 4)
    else:
        step_time = round(sum(p["seconds"] for p in phases.values()) / len(rows), 4) if rows else None
    record: dict[str, Any] = {
        "emulated": bool(emulated),
        "device": device,
        "fp8_backend": fp8_backend,
        "steps": len(rows),
        "step_time_s": step_time,
    }
    if peak_mem_mb is not None:
        record["peak_mem_mb"] = round(peak_mem_mb, 1)
    if threads is not None:
        record["threads"] = threads
    record["phases"] = phases
    if fp8_gemms is not None:
        record["fp8_gemms"] = fp8_gemms
    return record
