"""The speed figures README.md and docs/performance.md quote (fp8rl.report.quotes), generated from the
published benchmark records `results/published/benchmarks/vs_trl.json` (the grid against TRL) and
`vs_trl_packing.json` (the packed against the padded layout) and `vs_trl_repro.json` (the reproducible
against the fast bf16 step, on the current pin), each written by `benchmarks/vs_trl.py
--json`: per shape, the median step seconds of every run and their ratios, with the provenance (commit,
CPU and its ISA) and the load average at the start and end of the grid."""

from __future__ import annotations

import json
from pathlib import Path

from fp8rl.report.quote_format import QuoteError, markdown_table, num, quoted_block

RECORD = Path("benchmarks") / "vs_trl.json"
PACKING_RECORD = Path("benchmarks") / "vs_trl_packing.json"
REPRO_RECORD = Path("benchmarks") / "vs_trl_repro.json"
SPINNING_RECORD = Path("benchmarks") / "vs_trl_repro_spinning.json"
TARGETS = {"trl/bf16": 2.0, "fp8/bf16": 1.2, "fp8-block/bf16": 1.2, "bf16-repro/bf16": 1.5}


def benchmark_record(published: Path, name: Path, script: str, required: str) -> dict:
    """The published record `name` that `benchmarks/{script} --json` wrote; QuoteError naming the file
    when it is missing or has no `required` entries."""
    path = published / name
    if not path.is_file():
        raise QuoteError(f"{path}: not published (benchmarks/{script} --json, then copy it there)")
    record = json.loads(path.read_text(encoding="utf-8"))
    if not record.get(required):
        raise QuoteError(f"{path}: not a benchmarks/{script} record (no `{required}`)")
    return record


def vs_trl_record(published: Path, name: Path = RECORD) -> dict:
    return benchmark_record(published, name, "vs_trl.py", "shapes")


def ratio_range(record: dict, key: str) -> tuple[float, float, int] | None:
    """(lowest, highest, shapes) of one ratio over the grid; None when no shape has it."""
    values = [s["ratios"][key] for s in record["shapes"] if key in s["ratios"]]
    return (min(values), max(values), len(values)) if values else None


def spread(found: tuple[float, float, int]) -> str:
    """A `ratio_range` as text: 'a×' for one shape, 'a–b×' for more."""
    lo, hi, n = found
    return f"{num(lo)}×" if n == 1 else f"{num(lo)}–{num(hi)}×"


def commit_and_machine(record: dict) -> tuple[str, str]:
    """A benchmark record's commit (short, marked when the tree had uncommitted changes) and machine
    (cores, the CPU and its ISA: the fast mode's kernels depend on it), from its `provenance`."""
    prov = record.get("provenance", {})
    full = prov.get("git_commit") or "unknown"
    commit = full[:7] + (" with uncommitted changes" if full.endswith("+dirty") else "")
    where = f"{prov.get('machine', {}).get('cpus', '?')} cores"
    if cpu := prov.get("numerics", {}).get("cpu"):
        where += f" of an {cpu.get('model', '?')} ({', '.join(cpu.get('isa') or ['ISA not recorded'])})"
    return commit, where


def measured_on(record: dict) -> str:
    """Where and how a record was measured: commit, cores, the CPU and its ISA (the fast mode's kernels
    depend on it), load average, steps and repeats."""
    commit, where = commit_and_machine(record)
    start, end = record.get("load_average_start", [None])[0], record.get("load_average_end", [None])[0]
    load = (
        f"1-minute load average {num(start)} at the start, {num(end)} at the end" if start is not None else ""
    )
    return (
        f"Measured at commit {commit} on {where} ({load}); {record['steps']} timed steps, median of "
        f"{record['repeats']} interleaved repeats per run."
    )


def vs_trl_shapes(n: int) -> str:
    """`n shape(s) of `benchmarks/vs_trl.py``, the opening of every paragraph over a grid."""
    return f"{n} shape{'s' if n > 1 else ''} of `benchmarks/vs_trl.py`"


@quoted_block("performance-summary")
def performance_summary(published: Path) -> str:
    """One paragraph: the grid's ranges of the three targeted ratios and of what the pin costs."""
    r = vs_trl_record(published)
    ranges = {k: ratio_range(r, k) for k in ("trl/bf16", "fp8/bf16", "fp8-block/bf16", "bf16-repro/bf16")}
    parts = []
    if ranges["trl/bf16"]:
        met = ranges["trl/bf16"][0] >= TARGETS["trl/bf16"]
        parts.append(
            f"fp8rl's fast bf16 step is faster than TRL's faster mode by {spread(ranges['trl/bf16'])} "
            f"(target ≥ 2: {'met' if met else 'not met'})"
        )
    for key, name in (("fp8/bf16", "tensorwise"), ("fp8-block/bf16", "blockwise")):
        if ranges[key]:
            met = ranges[key][1] <= TARGETS[key]
            parts.append(
                f"its FP8 {name} step costs {spread(ranges[key])} the bf16 one (target ≤ 1.2: "
                f"{'met' if met else 'not met'})"
            )
    if ranges["bf16-repro/bf16"]:
        parts.append(f"the reproducible bf16 step costs {spread(ranges['bf16-repro/bf16'])} the fast one")
    return f"Over {vs_trl_shapes(len(r['shapes']))}, " + "; ".join(parts) + ". " + measured_on(r)


@quoted_block("performance-grid")
def performance_grid(published: Path) -> str:
    """The grid: per shape, fp8rl's bf16 step, TRL's faster mode, and the ratios."""
    r = vs_trl_record(published)
    header = [
        "shape",
        "fp8rl bf16 (s)",
        "TRL (s, mode)",
        "TRL / fp8rl",
        "fp8 / bf16",
        "block / bf16",
        "repro / fast",
    ]
    rows = []
    for s in r["shapes"]:
        step, ratios = s["step_s"], s["ratios"]
        mode = s["trl_mode"]  # TRL's faster mode, as the benchmark chose it
        trl = (step[f"trl-{mode}"], mode) if mode else None

        cells = [
            num(ratios[k]) if k in ratios else "–"
            for k in ("trl/bf16", "fp8/bf16", "fp8-block/bf16", "bf16-repro/bf16")
        ]
        rows.append(
            [s["shape"], num(step["bf16"], 3), f"{num(trl[0], 3)} ({trl[1]})" if trl else "–", *cells]
        )
    return (
        markdown_table(header, rows)
        + "\n\nShape: L layers, h hidden, t threads, n new tokens (16 prompts × 8 samples, one update per step). "
        + measured_on(r)
    )


@quoted_block("performance-packing")
def performance_packing(published: Path) -> str:
    """One paragraph: what training on real tokens only saves, over the packing record's grid."""
    r = vs_trl_record(published, PACKING_RECORD)
    found = ratio_range(r, "bf16-padded/bf16")
    if found is None:
        raise QuoteError(f"{published / PACKING_RECORD}: no shape ran both `bf16` and `bf16-padded`")
    return (
        f"Over {vs_trl_shapes(found[2])}, the bf16 step on the padded layout takes {spread(found)} the "
        "step on real tokens only. " + measured_on(r)
    )


def _by_threads(record: dict, key: str) -> str:
    """`at 1 thread a–b×, at 2 threads c–d×` for one ratio of a record."""
    parts = []
    for t in sorted({s["threads"] for s in record["shapes"]}):
        values = [s["ratios"][key] for s in record["shapes"] if s["threads"] == t and key in s["ratios"]]
        if values:
            found = (min(values), max(values), len(values))
            parts.append(f"at {t} thread{'s' if t > 1 else ''} {spread(found)}")
    return ", ".join(parts)


@quoted_block("performance-repro")
def performance_repro(published: Path) -> str:
    """A table and a paragraph: the reproducible bf16 step against the fast one per shape of the repro
    record, with the 1.5x target, and, when published, the same grid before OpenBLAS's idle threads were
    put to sleep (`vs_trl_repro_spinning.json`)."""
    r = vs_trl_record(published, REPRO_RECORD)
    found = ratio_range(r, "bf16-repro/bf16")
    if found is None:
        raise QuoteError(f"{published / REPRO_RECORD}: no shape ran both `bf16` and `bf16-repro`")
    rows = [
        [
            s["shape"],
            num(s["step_s"]["bf16"], 3),
            num(s["step_s"]["bf16-repro"], 3),
            num(s["ratios"]["bf16-repro/bf16"]),
        ]
        for s in r["shapes"]
        if "bf16-repro/bf16" in s["ratios"]
    ]
    met = found[1] <= TARGETS["bf16-repro/bf16"]
    out = (
        markdown_table(["shape", "fast bf16 (s)", "reproducible bf16 (s)", "reproducible / fast"], rows)
        + f"\n\nOver {vs_trl_shapes(found[2])}, the reproducible bf16 step costs {spread(found)} the fast "
        f"one ({_by_threads(r, 'bf16-repro/bf16')}; target ≤ {num(TARGETS['bf16-repro/bf16'], 1)} on every "
        f"shape: {'met' if met else 'not met'}). "
        + "Shape: L layers, h hidden, t threads, n new tokens (16 prompts × 8 samples, one update per step). "
        + measured_on(r)
    )
    if (published / SPINNING_RECORD).is_file():
        before = vs_trl_record(published, SPINNING_RECORD)
        out += (
            f"\n\nBefore (OpenBLAS's threads spinning between products), over "
            f"{vs_trl_shapes(len(before['shapes']))}: {_by_threads(before, 'bf16-repro/bf16')}. "
            + measured_on(before)
        )
    return out


STEP_AB_RECORD = Path("benchmarks") / "step_ab_longform.json"
STEP_TARGET = 2.0  # the realistic testbed's step against the code before the speed work


@quoted_block("performance-step-ab")
def performance_step_ab(published: Path) -> str:
    """A table and a paragraph: the longform testbed's step with transformers' growing KV cache and with
    the reserved one (`benchmarks/step_ab.py --json`), per phase, with the bit-for-bit check and the 2x
    target."""
    r = benchmark_record(published, STEP_AB_RECORD, "step_ab.py", "arms")
    phases = list(r["arms"]["after"]["phase_s"])
    rows = [
        [f"{arm} (`{r['switch']}={r[arm]}`)", num(a["step_s"], 3), *(num(a["phase_s"][p], 3) for p in phases)]
        for arm, a in ((arm, r["arms"][arm]) for arm in ("before", "after"))
    ]
    rows.append(
        ["before / after", f"{num(r['ratios']['step'])}×", *(f"{num(r['ratios'][p])}×" for p in phases)]
    )
    met = r["ratios"]["step"] >= STEP_TARGET
    return (
        markdown_table(["arm", "step (s)", *(f"{p} (s)" for p in phases)], rows)
        + f"\n\n`{r['run']}` of `{r['config']}`, seconds per step (phases per step). The metrics of the two "
        f"arms are {'the same bit for bit' if r['metrics_same'] else 'NOT the same'} (timing keys aside). "
        f"Target: the testbed's step ≥ {num(STEP_TARGET, 1)}× faster than before the speed work: "
        f"{'met' if met else 'not met'} by this change alone. " + measured_on(r)
    )
