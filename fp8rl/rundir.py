"""The run directory: where a run lives, what each of its files is called, and their writers and readers.

A run of tier `T` lives in `{results_dir}/T/runs/{run id}/` (`runs_dir`, `RunDir.of`):

- `config.yaml`: the resolved config;
- `metrics.jsonl`: one JSON object per optimizer step, appended and fsynced, truncated back to the
  checkpoint's byte offset on resume (`RunDir.append_metrics`, `RunDir.reset_metrics`), or written
  whole by the verl import (fp8rl.adapters.verl_metrics); non-finite values are absent, never written;
- `summary.json`: written last, so its presence means the run finished (`build_summary` makes it);
- `throughput.json`: per-phase seconds and tokens, one schema for both trainers (`throughput_record`);
- `ratio_hist.json`: an FP8 run's FP8 vs BF16-shadow ratio histogram;
- `checkpoint/`: the HF model (+ trainer state); `eval/lm_eval.json`, `eval/agent.json`: `fp8rl eval`,
  each with the `checkpoint_digest` of the checkpoint it scored;
- `run.json`: whose directory it is (`{"run_id": ...}`), written by the first trainer on it (`RunDir.claim`);
  a trainer or report finding another run id there (or in `summary.json`, `checkpoint/state.json`)
  refuses the directory (fp8rl.run_checks.owner_problems);
- `run.lock`: present while a trainer holds the directory (`RunDir.lock`): one writer per run.
- `tb/`: TensorBoard event files of the metrics (and `wandb/` where W&B is on): fp8rl.tracking.

Every other module takes these names from here; docs/interfaces.md documents the formats. Files are
written atomically (fp8rl.io) except `metrics.jsonl`'s appends. The bf16 run's clip fractions are the
targets of a `calib.reference: run` cell, per step (`reference_targets_by_step`), for the reference
trainer and verl alike.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from fp8rl.io import atomic_write_json, atomic_write_text, read_jsonl
from fp8rl.vocabulary import CLIP_HIGH_ALL, CLIP_HIGH_POS, CLIP_LOW_ALL, CLIP_LOW_NEG

RUNS_DIR = "runs"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
THROUGHPUT_FILE = "throughput.json"
RATIO_HIST_FILE = "ratio_hist.json"
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_STATE_FILE = "state.json"  # the reference trainer's checkpoint state (fp8rl.engine.checkpoint)
RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
EVAL_DIR = "eval"
# eval suite -> its result file, relative to the run directory
EVAL_FILES = {"lm_eval": f"{EVAL_DIR}/lm_eval.json", "agent": f"{EVAL_DIR}/agent.json"}
STATUSES = ("ok", "diverged", "failed")
# throughput.json's phases, in report order (time/{phase}_s and tok/{phase} in metrics.jsonl)
PHASES = ("rollout", "logprob", "train", "calib")


class RunDirLocked(Exception):
    """Another process holds the lock (of a run directory, or of a tier's report: `hold_lock`); the
    message names the directory and the holder."""


class LockUnsupported(RunDirLocked):
    """The filesystem refuses `flock` (Lustre mounted without `-o flock`, some NFS setups): the message
    names the file and the two ways out."""


# Set to 1 where the results filesystem has no flock and the scheduler alone keeps one writer per run.
NO_FLOCK_ENV = "FP8RL_NO_FLOCK"


def runs_dir(results_dir: str | Path, tier: str) -> Path:
    """`{results_dir}/{tier}/runs`: the folder holding every run directory of a tier."""
    return Path(results_dir) / tier / RUNS_DIR


class RunDir:
    """Paths, writers and strict readers of one run directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def of(cls, runs: str | Path, run_id: str) -> RunDir:
        """The run directory of `run_id` under a tier's runs folder (`runs_dir(...)`)."""
        return cls(Path(runs) / run_id)

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def throughput(self) -> Path:
        return self.root / THROUGHPUT_FILE

    @property
    def ratio_hist(self) -> Path:
        return self.root / RATIO_HIST_FILE

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_DIR

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def run_file(self) -> Path:
        return self.root / RUN_FILE

    def eval_file(self, suite: str) -> Path:
        """`eval/{suite}.json`; ValueError naming the known suites for another one."""
        if suite not in EVAL_FILES:
            raise ValueError(
                f"no eval result file for suite {suite!r}; known suites: {', '.join(EVAL_FILES)}"
            )
        return self.root / EVAL_FILES[suite]

    # -------------------------------------------------------------------------------------- lock

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run directory exclusively for the body: one writer per run.

        An exclusive `fcntl.flock` on `run.lock` (`hold_lock`), taken without waiting: if another
        process holds it, `RunDirLocked` names the holder (the pid, host and start time it wrote into the
        file) and nothing else is touched. The kernel releases the lock when the holder's process ends,
        however it ends; a lock file left by a killed holder is simply taken over. On exit the lock file
        is removed, and so are the folders this call created if they are still empty (a run refused
        before it wrote anything leaves nothing behind).
        """
        with hold_lock(self.lock_file, "wait for that run to end or stop it, or use another --out"):
            yield

    # ----------------------------------------------------------------------------------- writers

    def claim(self, run_id: str) -> None:
        """Write `run.json` naming `run_id` unless the directory already has one (check it first:
        fp8rl.run_checks.owner_problems)."""
        if not self.run_file.exists():
            atomic_write_json(self.run_file, {"run_id": run_id})

    def write_config(self, resolved: dict) -> None:
        import yaml

        atomic_write_text(self.config, yaml.safe_dump(resolved, sort_keys=False))

    def reset_metrics(self, offset: int) -> None:
        """Keep the first `offset` bytes of metrics.jsonl (what the checkpoint had written)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if offset == 0 or not self.metrics.exists():
            atomic_write_text(self.metrics, "")
            return
        size = self.metrics.stat().st_size
        if size < offset:
            raise ValueError(f"{self.metrics}: {size} bytes, shorter than the checkpoint's offset {offset}")
        with open(self.metrics, "r+b") as fh:
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())

    def append_metrics(self, row: dict) -> int:
        """Append one step's metrics (non-finite values dropped: absent, never NaN); returns the new size.
        All or nothing: a failed write (a full disk) is cut back off before the error goes on, so the
        file never ends in half a line the summary would contradict. A symbolic link is not followed."""
        line = (json.dumps(_finite_only(row), allow_nan=False) + "\n").encode()
        fd = os.open(self.metrics, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                with suppress(OSError):
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                raise
            return size + len(line)
        finally:
            os.close(fd)

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary, summary)

    def write_throughput(self, throughput: dict) -> None:
        atomic_write_json(self.throughput, throughput)

    def write_ratio_hist(self, hist: dict) -> None:
        """`ratio_hist.json`: FP8 vs BF16-shadow ratio counts of the shadow tokens (fp8rl.rl.ratio_hist)."""
        atomic_write_json(self.ratio_hist, hist, indent=None)

    # ----------------------------------------------------------------------------------- readers

    def metrics_size(self) -> int:
        return self.metrics.stat().st_size if self.metrics.exists() else 0

    def read_metrics(self) -> list[dict]:
        """Every row of metrics.jsonl ([] when there is none); ValueError naming the file and line of a
        malformed one (the report reads it leniently instead: fp8rl.report.load)."""
        return read_jsonl(self.metrics) if self.metrics.exists() else []

    def read_summary(self) -> dict:
        return _read_object(self.summary)

    def read_throughput(self) -> dict:
        return _read_object(self.throughput)


def checkpoint_digest(ckpt_dir: str | Path) -> str | None:
    """A fingerprint of a checkpoint directory's files (None when it does not exist): the sha256 over
    every file's relative path, size and content, of the first and last MiB only for a file above 4 MiB
    (weights: retraining changes them throughout). The reference trainer's `state.json`, hashed whole,
    records the sha256 of every file, so its checkpoints are pinned byte for byte. The eval result
    records it (`checkpoint_digest`); the report checks it against the run's checkpoint."""
    import hashlib

    root = Path(ckpt_dir)
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        size = p.stat().st_size
        h.update(f"{p.relative_to(root).as_posix()}\0{size}\0".encode())
        with open(p, "rb") as fh:
            if size <= 4 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 20))
                fh.seek(size - (1 << 20))
                h.update(fh.read())
    return h.hexdigest()


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` (itself included) that does not exist yet, or None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_empty(path: Path, *, up_to: Path) -> None:
    """Remove `path` and its parents up to `up_to` (included) while they are empty."""
    for p in (path, *path.parents):
        try:
            p.rmdir()
        except OSError:  # not empty (or gone): what is left belongs to someone
            return
        if p == up_to:
            return


@contextmanager
def hold_lock(lock_file: str | Path, hint: str) -> Iterator[None]:
    """Hold `lock_file` exclusively for the body (`fcntl.flock`, without waiting); `RunDirLocked` naming
    the holder and `hint` (what to do) if another process has it. The file says who holds it; it is
    removed on exit, and so are the folders this call created if they are still empty."""
    lock_file = Path(lock_file)
    first_new = _first_missing(lock_file.parent)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = _acquire(lock_file, hint)
    except BaseException:
        if first_new is not None:
            _remove_empty(lock_file.parent, up_to=first_new)
        raise
    try:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {stamp}\n".encode())
        yield
    finally:
        # unlink before unlocking: a process that opened the old file then sees it is stale (_acquire)
        lock_file.unlink(missing_ok=True)
        os.close(fd)
        if first_new is not None:
            _remove_empty(lock_file.parent, up_to=first_new)


def _acquire(path: Path, hint: str) -> int:
    """An open descriptor of `path` holding its exclusive flock; `RunDirLocked` if another process has it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.environ.get(NO_FLOCK_ENV) == "1":
            return fd  # no lock: the holder file is still written, for whoever looks
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace").strip() or "a process that has not said who"
            os.close(fd)
            raise RunDirLocked(
                f"{path.parent}: already in use by another writer ({holder}; lock file {path}); {hint}"
            ) from None
        except OSError as exc:  # ENOSYS, EOPNOTSUPP, ENOLCK, EINVAL: the filesystem has no flock
            empty = os.fstat(fd).st_size == 0  # no holder ever wrote it: ours to remove
            os.close(fd)
            if empty:
                path.unlink(missing_ok=True)
            raise LockUnsupported(
                f"{path}: the filesystem refuses flock ({exc.strerror or exc}); on Lustre mount with "
                f"`-o flock` (not `localflock`: that locks per node only), or set {NO_FLOCK_ENV}=1 to run "
                "without the lock when the scheduler alone keeps one writer per run directory"
            ) from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return fd
        os.close(fd)  # the holder removed this file as we locked it: lock the new one


def _finite_only(row: dict) -> dict:
    return {k: v for k, v in row.items() if not (isinstance(v, float) and not math.isfinite(v))}


def _read_object(path: Path) -> dict:
    """A JSON object from `path`; ValueError naming the file when it is missing, unreadable or not one."""
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a JSON object")
    return obj


# --------------------------------------------------------------------------------- summary.json


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
) -> dict:
    """The `summary.json` object of a finished run. `step` is the last step written (for `diverged`,
    the step where it was detected, or the last step trained when the run went on after it); `final` the
    last step's metrics the writer chose to keep. `divergence` (the first divergence: `kind`, `step`,
    `reason`), `backend`, `deviations` (what verl runs differently from the reference trainer) and
    `base` (the base model the run started from: `name` as endpoints.csv's `base`, the `seed` and
    `sft_seed` its `sft.json` recorded) are written only when given."""
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
    summary["provenance"] = provenance
    return summary


# ------------------------------------------------------------------------------ throughput.json


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


# ---------------------------------------------------------------- a bf16 run's calibration targets


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
