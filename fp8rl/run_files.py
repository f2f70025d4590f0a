"""The run directory: where a run lives, what each of its files is called, and their writers and readers.

A run of tier `T` lives in `{results_dir}/T/runs/{run id}/` (`runs_dir`, `RunDir.of`):

- `config.yaml`: the resolved config;
- `metrics.jsonl`: one JSON object per optimizer step, appended and fsynced, truncated back to the
  checkpoint's byte offset on resume (`RunDir.append_metrics`, `RunDir.reset_metrics`), or written
  whole by the verl import (fp8rl.adapters.verl_metrics); non-finite values are absent, never written;
- `summary.json`: written last, so its presence means the run finished (fp8rl.run_records.build_summary
  makes it);
- `throughput.json`: per-phase seconds and tokens, one schema for both trainers
  (fp8rl.run_records.throughput_record);
- `ratio_hist.json`: an FP8 run's FP8 vs BF16-shadow ratio histogram;
- `samples.jsonl` (`schedule.log_samples`): the first samples of every step, then those the gibberish
  detector flags (fp8rl.engine.collect `log_rows`), one JSON object each (`step`, `sample`,
  `text`, `reward`, `format_ok`, `gibberish`), appended like metrics.jsonl and cut back to the
  checkpoint's step on resume (`RunDir.append_samples`, `RunDir.reset_samples`);
- `checkpoint/`: the HF model (+ trainer state); `eval/lm_eval.json`, `eval/agent.json`: `fp8rl eval`,
  each with the `checkpoint_digest` of the checkpoint it scored (fp8rl.checkpoint_files);
- `run.json`: whose directory it is (`{"run_id": ...}`), written by the first trainer on it (`RunDir.claim`);
  a trainer or report finding another run id there (or in `summary.json`, `checkpoint/state.json`)
  refuses the directory (fp8rl.run_checks.owner_problems);
- `run.lock`: present while a trainer holds the directory (`RunDir.lock`, fp8rl.locks): one writer per run.
- `tb/`: TensorBoard event files of the metrics (and `wandb/` where W&B is on): fp8rl.tracking.

Every other module takes these names from here; docs/interfaces.md documents the formats. Files are
written atomically (fp8rl.io) except `metrics.jsonl`'s appends.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from fp8rl.io import atomic_write_json, atomic_write_text, read_jsonl, sha256_file
from fp8rl.locks import hold_lock
from fp8rl.vocabulary import EVAL_SUITES

RUNS_DIR = "runs"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
THROUGHPUT_FILE = "throughput.json"
RATIO_HIST_FILE = "ratio_hist.json"
SAMPLES_FILE = "samples.jsonl"
CHECKPOINT_DIR = "checkpoint"
NOISE_FILE = "noise.json"  # fp8.target_kl: the noise scale the run's search found (fp8rl.engine.noise_target)
HISTORY_DIR = "checkpoints"  # schedule.keep_every: checkpoints/step{N:05d}/, the weights at step N
CHECKPOINT_STATE_FILE = "state.json"  # the reference trainer's checkpoint state (fp8rl.engine.checkpoint)
RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
EVAL_DIR = "eval"
SFT_RECORD = "sft.json"  # a base's record (wall times: left out of its fingerprint), written last by the SFT
# eval suite (fp8rl.evaluate.suites) -> its result file, relative to the run directory
EVAL_FILES = {suite: f"{EVAL_DIR}/{suite}.json" for suite in EVAL_SUITES}


class RootPath:
    """A read-only attribute of an object with a `root` folder: the path `name` under that root (a run
    directory's files here, a report's in fp8rl.report.paths)."""

    def __init__(self, name: str, doc: str | None = None):
        self.name = name
        self.__doc__ = doc or f"`{name}` under the root folder"

    def __get__(self, obj: Any, owner: type | None = None) -> Path:
        if obj is None:
            return self  # type: ignore[return-value]  # the class's attribute: the descriptor itself
        return obj.root / self.name

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"{self.name}: a path under the root folder, not to be set")


def folder_fingerprint(folder: Path, skip: tuple[str, ...] = ()) -> str | None:
    """sha256 over the relative path and the sha256 of every file under `folder`, but those whose first
    path part is in `skip`; None when there is no such file."""
    h, seen = hashlib.sha256(), False
    for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
        rel = p.relative_to(folder)
        if p.is_file() and rel.parts[0] not in skip:
            h.update(f"{rel.as_posix()}\0{sha256_file(p)}\n".encode())
            seen = True
    return h.hexdigest() if seen else None


def base_fingerprint(base: Path) -> str | None:
    """A base folder's fingerprint: its weights, config and tokenizer (not `sft.json`, not `eval/`): what
    the run archive checks a base by, and what a shared noise search is keyed on."""
    return folder_fingerprint(base, skip=(SFT_RECORD, EVAL_DIR))


def runs_dir(results_dir: str | Path, tier: str) -> Path:
    """`{results_dir}/{tier}/runs`: the folder holding every run directory of a tier."""
    return Path(results_dir) / tier / RUNS_DIR


class RunDir:
    """Paths, writers and strict readers of one run directory."""

    config = RootPath(CONFIG_FILE)
    metrics = RootPath(METRICS_FILE)
    summary = RootPath(SUMMARY_FILE)
    throughput = RootPath(THROUGHPUT_FILE)
    ratio_hist = RootPath(RATIO_HIST_FILE)
    samples = RootPath(SAMPLES_FILE)
    checkpoint = RootPath(CHECKPOINT_DIR)
    history = RootPath(HISTORY_DIR)

    def kept_checkpoint(self, step: int) -> Path:
        """The weights kept at `step` (`schedule.keep_every`): `checkpoints/step{step:05d}/`."""
        return self.root / HISTORY_DIR / f"step{step:05d}"

    lock_file = RootPath(LOCK_FILE)
    run_file = RootPath(RUN_FILE)

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def of(cls, runs: str | Path, run_id: str) -> RunDir:
        """The run directory of `run_id` under a tier's runs folder (`runs_dir(...)`)."""
        return cls(Path(runs) / run_id)

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
        return _append(self.metrics, (json.dumps(_finite_only(row), allow_nan=False) + "\n").encode())

    def reset_samples(self, last_step: int) -> None:
        """Keep the rows of `samples.jsonl` up to `last_step` (the checkpoint a run resumes from; 0: none),
        rewritten atomically; nothing to do when there is no file and nothing to keep."""
        if not self.samples.exists():
            if last_step == 0:
                return
            rows = []
        else:
            rows = [r for r in read_jsonl(self.samples) if int(r["step"]) <= last_step]
        atomic_write_text(self.samples, "".join(json.dumps(r) + "\n" for r in rows))

    def append_samples(self, step: int, rows: list[dict]) -> None:
        """Append one step's sample rows (`step` added to each) to `samples.jsonl`, all or nothing."""
        if rows:
            _append(self.samples, "".join(json.dumps({"step": step, **r}) + "\n" for r in rows).encode())

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


def _append(path: Path, line: bytes) -> int:
    """Append `line` to `path` and fsync; returns the new size. A failed write is cut back off before the
    error goes on (the file never ends in half a line); a symbolic link is not followed."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
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
