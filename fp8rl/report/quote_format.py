"""The one mechanism behind the quoted result blocks (fp8rl.report.quotes): the block registry, the
sources a block reads (a tier's published table, a published benchmark record) and every format a
figure is printed in, so a figure reads alike in every block.

A block is a template over a kind of published source: one generator function, registered once per
block that uses it with `@quoted_block(NAME, **bound)` (e.g. `tier="learn"`), so the learning and the
mechanism tier's mismatch blocks are one function bound twice. Clip fractions are printed in % and their
differences in percentage points (pp), each with its 95 % interval as the table gives it; **bold** marks
an interval that excludes 0.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

SIGNIFICANCE_NOTE = "**bold**: the 95 % interval excludes 0."


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
        raise QuoteError(f"benchmark record {name!r}: not declared in quote_format.RECORDS")
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


# ------------------------------------------------------------------------------------------ formats


def num(x: float, digits: int = 2, sign: bool = False) -> str:
    """`x` to `digits` decimals (a true minus sign; `sign`: always signed); `n/a` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "−")


def g(x: float, digits: int = 2) -> str:
    """A small positive figure in its own scale (1.2e-3, 0.045, 12); `–` for a missing one."""
    if pd.isna(x):
        return "–"
    return f"{x:.{digits}g}".replace("e-0", "e-")


def p_text(p: float) -> str:
    """`< 0.001` or `= 0.042`: a p-value after `p`."""
    return "< 0.001" if p < 0.001 else f"= {num(p, 3)}"


def minutes(seconds: float) -> str:
    """`7 min 22 s`."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s"


def plural(n: int, word: str) -> str:
    """`1 shape`, `2 shapes`."""
    return f"{n} {word}{'s' if n != 1 else ''}"


def spread(values: list[float]) -> str:
    """A ratio over shapes as text: 'a×' for one value, 'lowest–highest×' for more."""
    return f"{num(values[0])}×" if len(values) == 1 else f"{num(min(values))}–{num(max(values))}×"


def pct(row: pd.Series, col: str) -> str:
    """`1.26 % [0.98, 1.54]` from the columns `col`, `col ci_low`, `col ci_high` (fractions)."""
    est = 100 * row[col]
    lo, hi = 100 * row.get(f"{col} ci_low", math.nan), 100 * row.get(f"{col} ci_high", math.nan)
    bracket = "" if math.isnan(lo) else f" [{num(lo)}, {num(hi)}]"
    return f"{num(est)} %{bracket}"


def pp(est: float, lo: float, hi: float) -> str:
    """`+0.70 pp [−0.05, +1.34]` from fractions; bold when the interval excludes 0."""
    if est is None or math.isnan(est):
        return "n/a"
    if math.isnan(lo):
        return f"{num(100 * est, sign=True)} pp (no interval)"
    text = f"{num(100 * est, sign=True)} pp [{num(100 * lo, sign=True)}, {num(100 * hi, sign=True)}]"
    return f"**{text}**" if excludes_zero(lo, hi) else text


def ci(row: pd.Series | dict, col: str, delta: bool = False) -> tuple[float, float, float]:
    """(estimate, low, high) of a table's column `col` with its interval (`col ci_low`, `col ci_high`), or,
    with `delta`, of its difference to bf16 (`col delta`, `col delta_ci_low`, `col delta_ci_high`)."""
    keys = ("delta", "delta_ci_low", "delta_ci_high") if delta else ("", "ci_low", "ci_high")
    return tuple(row[f"{col} {k}".rstrip()] for k in keys)


def pp_point(est: float) -> str:
    """`+0.70 pp` from a fraction, without its interval."""
    return f"{num(100 * est, sign=True)} pp"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def excludes_zero(lo: float, hi: float) -> bool:
    """Whether the interval [lo, hi] lies on one side of 0: False when either end is missing, and for a
    zero-width interval (seeds that all gave one value measure no spread, so they show nothing)."""
    return not (math.isnan(lo) or math.isnan(hi)) and lo < hi and (lo > 0 or hi < 0)


def interval(est: float, lo: float, hi: float, digits: int = 2) -> str:
    """`est [lo, hi]`, or `est` alone without an interval."""
    if math.isnan(lo):
        return num(est, digits)
    return f"{num(est, digits)} [{num(lo, digits)}, {num(hi, digits)}]"
