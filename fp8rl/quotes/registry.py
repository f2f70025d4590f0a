"""The one mechanism behind the quoted result blocks (fp8rl.quotes.files): the block registry and the
sources a block reads (a tier's published table, a published benchmark record). Figures are printed in
the report's formats (fp8rl.report.formats), so a figure reads alike in a block and on a SUMMARY page.

A block is a template over a kind of published source: one generator function, registered once per
block that uses it with `@quoted_block(NAME, **bound)` (e.g. `tier="learn"`), so the learning and the
mechanism tier's mismatch blocks are one function bound twice.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fp8rl.report.formats import num


class QuoteError(ValueError):
    """A block names no known generator, or a source it reads (a published table, a benchmark record) is
    missing or not what its writer writes."""


# ------------------------------------------------------------------------------------------ registry

BLOCKS: dict[str, Callable[[Path], str]] = {}  # NAME of `<!-- fp8rl:results NAME -->` -> its generator


def quoted_block(name: str, **bound) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register the decorated function (published folder, then `bound` as keywords -> the block's
    markdown) as the generator of the quoted block `name`; stacked, one function serves several blocks.
    A name registered twice is a ValueError naming both functions; the block keeps `bound` as its `bound`
    attribute. Returns the function unchanged."""

    def register(fn: Callable[..., str]) -> Callable[..., str]:
        if name in BLOCKS:
            raise ValueError(f"quoted block {name!r}: {fn.__qualname__} and {BLOCKS[name].__qualname__}")

        @functools.wraps(fn)
        def block(published: Path) -> str:
            return fn(published, **bound)

        block.bound = bound  # what the block binds, for a test that checks it against a config
        BLOCKS[name] = block
        return fn

    return register


# ------------------------------------------------------------------------------------------ sources


def published_table(published: Path, tier: str, name: str) -> pd.DataFrame:
    """`{published}/{tier}/tables/{name}.csv`; QuoteError when the tier has not published it."""
    path = published / tier / "tables" / f"{name}.csv"
    if not path.is_file():
        raise QuoteError(f"{path}: not published (run the tier and `fp8rl publish {tier}` first)")
    return pd.read_csv(path)


def optional_table(published: Path, tier: str, name: str) -> pd.DataFrame | None:
    """`{published}/{tier}/tables/{name}.csv`, or None when the tier has not published it."""
    path = published / tier / "tables" / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else None


def arm_rows(ends: pd.DataFrame) -> pd.DataFrame:
    """endpoints.csv's study runs, one row per arm a run belongs to (`arm`: `a;b` for a run of two)."""
    return ends[ends["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")


# Every published benchmark record (`results/published/benchmarks/NAME.json`): the script whose `--json`
# writes it and a key it must hold.
RECORDS = {
    "vs_trl": ("vs_trl.py", "shapes"),  # the grid against TRL
    "vs_trl_packing": ("vs_trl.py", "shapes"),  # the packed against the padded layout
    "vs_trl_repro": ("vs_trl.py", "shapes"),  # the reproducible against the fast bf16 step
    "vs_trl_repro_spinning": ("vs_trl.py", "shapes"),  # the same, before OpenBLAS's idle threads slept
    "step_ab_longform": ("step_ab.py", "arms"),  # the longform step with and without a change
    "step_ab_fp8_compile_longform": ("step_ab.py", "arms"),  # FP8 + TIS, eager against compiled fake quant
    "calib_cadence_longform": ("calib_cadence.py", "arms"),  # calibration per update against every N steps
    "sampler_draw": ("sampler_draw.py", "shapes"),  # the two token draws, alone and in generate
    "step_ab_sampler_draw_longform": ("step_ab.py", "arms"),  # the longform step with each draw
    "testbed_profile_longform": ("testbed_profile.py", "runs"),  # where the longform step goes
    "smoke_dag": ("dag_time.py", "rules"),  # the smoke DAG from a clean clone
    "stress_dag": ("dag_time.py", "rules"),  # the stress tier
    "smoke_dag_eval_per_suite": ("dag_time.py", "rules"),  # the smoke DAG, one eval process per suite
    "smoke_dag_eval_per_run": ("dag_time.py", "rules"),  # the same, one per run (measured back to back)
    "process_startup": ("process_startup.py", "median_s"),  # a job's imports before its work
    "gemm_paths": ("gemm_paths.py", "gflops"),  # the pin's fp32 GEMMs against the other kernel paths
}


def record_path(published: Path, name: str) -> Path:
    """Where the published benchmark record `name` (a key of `RECORDS`) lies."""
    return published / "benchmarks" / f"{name}.json"


def record(published: Path, name: str) -> dict:
    """The published benchmark record `name` (`RECORDS`); QuoteError naming the file when it is missing
    or lacks the entries its script writes."""
    if name not in RECORDS:
        raise QuoteError(f"benchmark record {name!r}: not declared in fp8rl.quotes.registry.RECORDS")
    path, (script, required) = record_path(published, name), RECORDS[name]
    if not path.is_file():
        raise QuoteError(f"{path}: not published (benchmarks/{script} --json, then copy it there)")
    found = json.loads(path.read_text(encoding="utf-8"))
    if not found.get(required):
        raise QuoteError(f"{path}: not a benchmarks/{script} record (no `{required}`)")
    return found


def measured_at(found: dict, load: str = "") -> str:
    """Where a benchmark record was measured, from its `provenance`: `commit abc1234 on 4 cores of an X
    (ISA)` (the commit marked when the tree had uncommitted changes, or the record's `checkout`: a commit
    with others applied; the CPU and its ISA, on which the fast mode's kernels depend), then the 1-minute
    load average at the `end`, or at the start and end (`both`)."""
    prov = found.get("provenance", {})
    full = prov.get("git_commit") or "unknown"
    commit = full[:7] + (" with uncommitted changes" if full.endswith("+dirty") else "")
    text = (
        f"{found.get('checkout') or f'commit {commit}'} on {prov.get('machine', {}).get('cpus', '?')} cores"
    )
    if cpu := prov.get("numerics", {}).get("cpu"):
        text += f" of an {cpu.get('model', '?')} ({', '.join(cpu.get('isa') or ['ISA not recorded'])})"
    start, end = found.get("load_average_start", [None])[0], (found.get("load_average_end") or [None])[0]
    if load == "both" and start is not None:
        return f"{text} (1-minute load average {num(start)} at the start, {num(end)} at the end)"
    return (
        f"{text} (1-minute load average {num(end)} at the end)" if load == "end" and end is not None else text
    )
