"""The run directory of DESIGN.md §7 and docs/interfaces.md, and its writers.

`{out}/config.yaml` (resolved config), `metrics.jsonl` (one line per optimizer step, appended and
fsynced, truncated back to the checkpoint's byte offset on resume), `summary.json` (written last),
`throughput.json`, `checkpoint/` (HF model + trainer state) and `eval/` (written by `fp8rl eval`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from fp8rl.io import atomic_write_json, atomic_write_text, read_jsonl


class RunDir:
    """Paths and writers of one run directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def throughput(self) -> Path:
        return self.root / "throughput.json"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

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
        """Append one step's metrics (non-finite values dropped: absent, never NaN); returns the new size."""
        clean = {k: v for k, v in row.items() if not (isinstance(v, float) and not math.isfinite(v))}
        with open(self.metrics, "a") as fh:
            fh.write(json.dumps(clean, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return self.metrics.stat().st_size

    def metrics_size(self) -> int:
        return self.metrics.stat().st_size if self.metrics.exists() else 0

    def read_metrics(self) -> list[dict]:
        return read_jsonl(self.metrics) if self.metrics.exists() else []

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.summary, summary)

    def write_throughput(self, throughput: dict) -> None:
        atomic_write_json(self.throughput, throughput)

    def write_ratio_hist(self, hist: dict) -> None:
        """`ratio_hist.json`: FP8 vs BF16-shadow ratio counts of the shadow tokens (fp8rl.rl.ratio_hist)."""
        atomic_write_json(self.root / "ratio_hist.json", hist, indent=None)


def reference_targets(run_dir: str | Path, population: str) -> dict[int, tuple[float | None, float | None]]:
    """Per-step calibration targets from a finished bf16 run (`calib.reference: run`).

    The bf16 run records, under its fixed bounds, `clip/low_all` / `clip/high_all` (fractions of all
    valid tokens with r < 1-clip_low / r > 1+clip_high) and `clip/low_neg` / `clip/high_pos` (among
    A<0 / A>0 tokens); population `all` reads the first pair, `neg` the second. Returns
    `{step: (q_low, q_high)}`; ValueError naming the file if it is missing or has no usable step.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"--reference {run_dir}: no metrics.jsonl (is it a finished bf16 run directory?)")
    lo_key, hi_key = (
        ("clip/low_all", "clip/high_all") if population == "all" else ("clip/low_neg", "clip/high_pos")
    )
    out = {}
    for row in read_jsonl(path):
        if "step" in row and lo_key in row:
            out[int(row["step"])] = (float(row[lo_key]), row.get(hi_key))
    if not out:
        raise ValueError(f"{path}: no step records {lo_key!r}; not a usable reference run")
    return out
