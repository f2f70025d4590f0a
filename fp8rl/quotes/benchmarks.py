"""The quoted blocks of the measurements (fp8rl.quotes.files): speed, run time and kernel paths, from the
published benchmark records (`results/published/benchmarks/*.json`, fp8rl.quotes.registry.RECORDS) and
the tiers' own record of their kernels.

- `benchmarks/vs_trl.py --json`: per shape, the median step seconds of every run and their ratios (the
  grid against TRL, the packed against the padded layout, the reproducible against the fast bf16 step);
- `benchmarks/dag_time.py --json`: per rule of a tier's DAG, its jobs, their wall and CPU seconds summed
  and the rule's span (first job's start to last job's end), and the whole DAG's span;
- `benchmarks/process_startup.py --json`: what a job's process pays in imports before its work starts;
- `benchmarks/gemm_paths.py --json`: the pin's fp32 GEMMs against the other kernel paths;
- each published tier's `report.json`: which kernel path its runs took.

Each record carries its provenance (commit, CPU and its ISA) and the load average, said after its
figures (fp8rl.quotes.registry.measured_at). The longform testbed's step, change by change, is
fp8rl.quotes.step's.
"""

from __future__ import annotations

import json
from pathlib import Path

from fp8rl import numerics
from fp8rl.quotes.registry import QuoteError, measured_at, quoted_block, record, record_path
from fp8rl.report.formats import markdown_table, minutes, num, plural, spread

TARGETS = {"trl/bf16": 2.0, "fp8/bf16": 1.2, "fp8-block/bf16": 1.2, "bf16-repro/bf16": 1.5}
RATIOS = ("trl/bf16", "fp8/bf16", "fp8-block/bf16", "bf16-repro/bf16")
SHAPE_NOTE = (
    "Shape: L layers, h hidden, t threads, n new tokens (16 prompts × 8 samples, one update per step). "
)
SMOKE_TARGET_MIN = 5.0  # the whole smoke DAG, first job's start to last job's end
STRESS_TARGET_MIN = 20.0  # the stress tier's training: the `train` rule's span
# The smoke DAG's evaluation rules before and after one evaluation process per run (rule `eval`).
EVAL_RULES = {"smoke_dag_eval_per_suite": ("eval_lm", "eval_agent"), "smoke_dag_eval_per_run": ("eval",)}


def ratios(found: dict, key: str, threads: int | None = None) -> list[float]:
    """One ratio over a vs_trl record's shapes (of `threads` only, when given) that have it."""
    return [
        s["ratios"][key] for s in found["shapes"] if key in s["ratios"] and threads in (None, s["threads"])
    ]


def measured_on(found: dict) -> str:
    """Where and how a vs_trl record was measured: commit, machine, load average, steps and repeats."""
    return (
        f"Measured at {measured_at(found, 'both')}; {found['steps']} timed steps, median of "
        f"{found['repeats']} interleaved repeats per run."
    )


def vs_trl_shapes(n: int) -> str:
    """`n shape(s) of `benchmarks/vs_trl.py``, the opening of every paragraph over a grid."""
    return f"{plural(n, 'shape')} of `benchmarks/vs_trl.py`"


def met(ok: bool) -> str:
    return "met" if ok else "not met"


@quoted_block("performance-summary")
def performance_summary(published: Path) -> str:
    """One paragraph: the grid's ranges of the three targeted ratios and of what the pin costs."""
    r = record(published, "vs_trl")
    found = {k: ratios(r, k) for k in RATIOS}
    parts = []
    if found["trl/bf16"]:
        parts.append(
            f"fp8rl's fast bf16 step is faster than TRL's faster mode by {spread(found['trl/bf16'])} "
            f"(target ≥ 2: {met(min(found['trl/bf16']) >= TARGETS['trl/bf16'])})"
        )
    for key, name in (("fp8/bf16", "tensorwise"), ("fp8-block/bf16", "blockwise")):
        if found[key]:
            parts.append(
                f"its FP8 {name} step costs {spread(found[key])} the bf16 one (target ≤ 1.2: "
                f"{met(max(found[key]) <= TARGETS[key])})"
            )
    if found["bf16-repro/bf16"]:
        parts.append(f"the reproducible bf16 step costs {spread(found['bf16-repro/bf16'])} the fast one")
    return f"Over {vs_trl_shapes(len(r['shapes']))}, " + "; ".join(parts) + ". " + measured_on(r)


@quoted_block("performance-grid")
def performance_grid(published: Path) -> str:
    """The grid: per shape, fp8rl's bf16 step, TRL's faster mode (as the benchmark chose it), the ratios."""
    r = record(published, "vs_trl")
    header = ["shape", "fp8rl bf16 (s)", "TRL (s, mode)", "TRL / fp8rl", "fp8 / bf16", "block / bf16",
              "repro / fast"]  # fmt: skip
    rows = []
    for s in r["shapes"]:
        mode = s["trl_mode"]
        trl = f"{num(s['step_s'][f'trl-{mode}'], 3)} ({mode})" if mode else "–"
        cells = [num(s["ratios"][k]) if k in s["ratios"] else "–" for k in RATIOS]
        rows.append([s["shape"], num(s["step_s"]["bf16"], 3), trl, *cells])
    return markdown_table(header, rows) + "\n\n" + SHAPE_NOTE + measured_on(r)


@quoted_block("performance-packing")
def performance_packing(published: Path) -> str:
    """One paragraph: what training on real tokens only saves, over the packing record's grid."""
    r = record(published, "vs_trl_packing")
    found = ratios(r, "bf16-padded/bf16")
    if not found:
        raise QuoteError(
            f"{record_path(published, 'vs_trl_packing')}: no shape ran both `bf16` and `bf16-padded`"
        )
    return (
        f"Over {vs_trl_shapes(len(found))}, the bf16 step on the padded layout takes {spread(found)} the "
        "step on real tokens only. " + measured_on(r)
    )


def _by_threads(found: dict, key: str) -> str:
    """`at 1 thread a–b×, at 2 threads c–d×` for one ratio of a record."""
    parts = []
    for t in sorted({s["threads"] for s in found["shapes"]}):
        if values := ratios(found, key, t):
            parts.append(f"at {plural(t, 'thread')} {spread(values)}")
    return ", ".join(parts)


@quoted_block("performance-repro")
def performance_repro(published: Path) -> str:
    """A table and a paragraph: the reproducible bf16 step against the fast one per shape of the repro
    record, with the 1.5x target, and, when published, the same grid before OpenBLAS's idle threads were
    put to sleep (`vs_trl_repro_spinning.json`)."""
    r, key = record(published, "vs_trl_repro"), "bf16-repro/bf16"
    found = ratios(r, key)
    if not found:
        raise QuoteError(
            f"{record_path(published, 'vs_trl_repro')}: no shape ran both `bf16` and `bf16-repro`"
        )
    rows = [
        [s["shape"], num(s["step_s"]["bf16"], 3), num(s["step_s"]["bf16-repro"], 3), num(s["ratios"][key])]
        for s in r["shapes"]
        if key in s["ratios"]
    ]
    out = (
        markdown_table(["shape", "fast bf16 (s)", "reproducible bf16 (s)", "reproducible / fast"], rows)
        + f"\n\nOver {vs_trl_shapes(len(found))}, the reproducible bf16 step costs {spread(found)} the fast "
        f"one ({_by_threads(r, key)}; target ≤ {num(TARGETS[key], 1)} on every "
        f"shape: {met(max(found) <= TARGETS[key])}). " + SHAPE_NOTE + measured_on(r)
    )
    if record_path(published, "vs_trl_repro_spinning").is_file():
        before = record(published, "vs_trl_repro_spinning")
        out += (
            f"\n\nBefore (OpenBLAS's threads spinning between products), over "
            f"{vs_trl_shapes(len(before['shapes']))}: {_by_threads(before, key)}. " + measured_on(before)
        )
    return out


def _verdict(seconds: float, target_min: float) -> str:
    return f"target ≤ {num(target_min, 0)} min: {met(seconds <= 60 * target_min)}"


def _per_rule(found: dict) -> str:
    """Each rule's jobs and summed wall seconds, largest first."""
    rules = sorted(found["rules"].items(), key=lambda kv: -kv[1]["seconds_summed"])
    return ", ".join(
        f"{rule} {num(r['seconds_summed'], 0)} s ({plural(r['jobs'], 'job')})" for rule, r in rules
    )


@quoted_block("performance-dag")
def performance_dag(published: Path) -> str:
    """Two paragraphs: the smoke DAG's span and the stress tier's training span, each against its target,
    with the per-rule split that sets them."""
    smoke, stress = record(published, "smoke_dag"), record(published, "stress_dag")
    if "train" not in stress["rules"]:
        raise QuoteError(f"{record_path(published, 'stress_dag')}: no `train` jobs recorded")
    span, train = smoke["span_seconds"], stress["rules"]["train"]
    return (
        f"The smoke DAG ran in {minutes(span)} from its first job's start to its last job's end "
        f"({_verdict(span, SMOKE_TARGET_MIN)}); its jobs' wall seconds summed per rule (jobs run side by side, one per core): "
        f"{_per_rule(smoke)}. Measured at {measured_at(smoke)}.\n\n"
        f"The stress tier's {train['jobs']} training runs ran in {minutes(train['span_seconds'])} from "
        f"the first one's start to the last one's end ({_verdict(train['span_seconds'], STRESS_TARGET_MIN)}"
        f"); {num(train['seconds_summed'] / train['jobs'], 0)} s of wall time per run on average, "
        f"{num(train['cpu_seconds_summed'] / train['seconds_summed'], 2)} CPU seconds per wall second. "
        f"The whole tier: {_per_rule(stress)}. Measured at {measured_at(stress)}."
    )


@quoted_block("performance-startup")
def performance_startup(published: Path) -> str:
    """A table and a sentence: per job kind of the smoke DAG, the median seconds a fresh process spends
    importing what that job imports, its mean job time in the smoke DAG record, and the share; then the
    imports summed over the DAG's jobs against all its job seconds."""
    startup, smoke = record(published, "process_startup"), record(published, "smoke_dag")
    rows, imports = [], 0.0
    for kind, seconds in startup["median_s"].items():
        if (rule := smoke["rules"].get(kind)) is None:
            continue
        job = rule["seconds_summed"] / rule["jobs"]
        rows.append([kind, str(rule["jobs"]), num(seconds), num(job, 1), f"{num(100 * seconds / job, 0)} %"])
        imports += seconds * rule["jobs"]
    total = sum(r["seconds_summed"] for r in smoke["rules"].values())
    return (
        markdown_table(["job", "jobs in the smoke DAG", "imports (s)", "mean job (s)", "imports / job"], rows)
        + f"\n\nThe imports alone, summed over the smoke DAG's jobs: {num(imports, 0)} s of its {num(total, 0)} "
        f"job seconds ({num(100 * imports / total, 0)} %). Imports: the median of {startup['repeats']} fresh "
        f"processes per job kind, interleaved, {startup['threads']} thread each. Measured at "
        f"{measured_at(startup)}."
    )


def _eval_jobs(published: Path, name: str) -> tuple[dict, int, float, float]:
    """(the record, its evaluation rules' jobs, wall seconds, CPU seconds, summed)."""
    found = record(published, name)
    missing = [r for r in EVAL_RULES[name] if r not in found["rules"]]
    if missing:
        raise QuoteError(f"{record_path(published, name)}: no `{missing[0]}` jobs recorded")
    rules = [found["rules"][r] for r in EVAL_RULES[name]]
    return found, *(sum(r[k] for r in rules) for k in ("jobs", "seconds_summed", "cpu_seconds_summed"))


@quoted_block("performance-dag-eval")
def performance_dag_eval(published: Path) -> str:
    """One paragraph: the smoke DAG before and after one evaluation process per run, its span and its
    evaluation jobs' summed wall and CPU seconds, each as after / before, with where each was measured."""
    before, jobs_b, wall_b, cpu_b = _eval_jobs(published, "smoke_dag_eval_per_suite")
    after, jobs_a, wall_a, cpu_a = _eval_jobs(published, "smoke_dag_eval_per_run")
    span_b, span_a = before["span_seconds"], after["span_seconds"]
    return (
        f"The smoke DAG from scratch ran in {minutes(span_b)} with one evaluation process per run and suite "
        f"({jobs_b} evaluation jobs, {num(wall_b, 0)} s of wall time and {num(cpu_b, 0)} CPU seconds summed) "
        f"and in {minutes(span_a)} with one per run ({jobs_a} jobs, {num(wall_a, 0)} s and {num(cpu_a, 0)} "
        f"CPU seconds): after / before {num(span_a / span_b)} for the whole DAG, {num(wall_a / wall_b)} for "
        f"the evaluations' wall time and {num(cpu_a / cpu_b)} for their CPU time. Before: measured at "
        f"{measured_at(before, 'end')}; after: at {measured_at(after, 'end')}."
    )


def tier_numerics(tier_dir: Path) -> dict[str, list[str]]:
    """What a published tier's runs ran on: modes, CPU models and MKL branches, from the runs' own record
    in `report.json` (fp8rl.report.base_models.runs_numerics); reports from before the MKL branch was
    recorded take it from `provenance.json` (the publishing process ran the same code and pin)."""
    runs = json.loads((tier_dir / "report.json").read_text(encoding="utf-8")).get("numerics") or {}
    if "mkl" not in runs:
        prov = json.loads((tier_dir / "provenance.json").read_text(encoding="utf-8")).get("numerics") or {}
        pinned = runs.get("modes") == ["reproducible"]
        runs = {
            **runs,
            "mkl": [(prov.get("env") or {}).get("MKL_CBWR") or "auto"] if pinned else ["unrecorded"],
        }
    return runs


def _kernel_path(runs: dict[str, list[str]]) -> str:
    """How a tier's runs relate to today's pin, in words."""
    if runs.get("modes") != ["reproducible"]:
        return (
            f"{', '.join(f'`{m}`' for m in runs.get('modes', [])) or 'no'} mode: that machine's own kernels"
        )
    if runs["mkl"] == [numerics.PINNED_ENV["MKL_CBWR"]]:
        if runs.get("gemms") == [f"OpenBLAS {numerics.PINNED_ENV['OPENBLAS_CORETYPE']}"]:
            vendors = sorted({v for v in map(numerics.cpu_vendor, runs.get("cpus", [])) if v})
            where = f"{' and '.join(vendors)} CPUs" if vendors else "CPUs of the vendor it ran on"
            return f"today's pin: reproduces on {where} with AVX2, not across vendors"
        return "the pin before the OpenBLAS kernel (GEMMs on MKL's COMPATIBLE branch): to be re-run under today's"
    return "an earlier pin: reproduces only on a CPU like that one; to be re-run under today's"


@quoted_block("numerics-pins")
def numerics_pins(published: Path) -> str:
    """One row per published tier: when, on which CPU, under which MKL branch and on which GEMM kernel its
    runs ran, and whether that is the pin of this code (a re-run from a clean clone reproduces its tables
    only then)."""
    rows = []
    for report in sorted(published.glob("*/report.json")):
        prov = json.loads((report.parent / "provenance.json").read_text(encoding="utf-8"))
        runs = tier_numerics(report.parent)
        rows.append([
            f"`{report.parent.name}`", str(prov.get("published", "?"))[:10], ", ".join(runs.get("cpus", [])) or "?",
            ", ".join(f"`{b}`" for b in runs["mkl"]), ", ".join(runs.get("gemms") or ["MKL (not recorded)"]),
            _kernel_path(runs),
        ])  # fmt: skip
    if not rows:
        raise QuoteError(f"{published}: no */report.json (nothing published)")
    return markdown_table(["tier", "published", "CPU", "MKL branch", "GEMMs", "kernel path"], rows)


@quoted_block("numerics-vendors")
def numerics_vendors(published: Path) -> str:
    """One row per tier published on both CPU vendors (`X` and `X_amd` or `X_intel`): each one's CPU, the
    base's final SFT loss in each, and how many of the tier's tables (throughput aside) are byte-identical
    between the two: the pin's reach across vendors, measured."""
    rows = []
    for other in sorted(p for p in published.iterdir() if p.name.endswith(("_amd", "_intel"))):
        first = published / other.name.rsplit("_", 1)[0]
        if not (first / "report.json").is_file() or not (other / "report.json").is_file():
            continue
        tables = sorted(
            t.name for t in (first / "tables").glob("*.csv") if not t.name.startswith("throughput")
        )
        same = sum((first / "tables" / t).read_bytes() == (other / "tables" / t).read_bytes()
                   for t in tables if (other / "tables" / t).is_file())  # fmt: skip
        cpus = [", ".join(tier_numerics(d).get("cpus", [])) or "?" for d in (first, other)]
        losses = [_base_losses(d) for d in (first, other)]
        rows.append([f"`{first.name}` / `{other.name}`", *cpus, *losses, f"{same} of {len(tables)}"])
    if not rows:
        raise QuoteError(f"{published}: no tier published on both vendors (a `*_amd` or `*_intel` beside it)")
    return markdown_table(["tiers", "CPU", "other CPU", "base loss/final", "other base loss/final",
                           "tables identical"], rows)  # fmt: skip


def _base_losses(tier_dir: Path) -> str:
    import csv

    with open(tier_dir / "tables" / "base_models.csv", newline="", encoding="utf-8") as fh:
        return ", ".join(row["loss/final"] for row in csv.DictReader(fh))


@quoted_block("performance-gemm-paths")
def performance_gemm_paths(published: Path) -> str:
    """Per thread count, the range over the grid of the pin's fp32 GEMM time (the pinned OpenBLAS kernel)
    over each other path's (MKL's COMPATIBLE branch, its AVX2 branch, the CPU's own AUTO), with where it
    was measured (above 1: the pin is slower)."""
    r = record(published, "gemm_paths")
    pin, *others = list(r["paths"])
    if pin != r.get("pin") or not r["paths"][pin]["pinned_blas"]:
        raise QuoteError(
            f"{record_path(published, 'gemm_paths')}: its first path {pin!r} is not the pinned OpenBLAS kernel"
        )
    parts = []
    for threads, grid in r["gflops"].items():
        spans = []
        for other in others:
            times = [o / p for o, p in zip(grid[other], grid[pin], strict=True)]
            spans.append(f"{num(min(times))}–{num(max(times))}× the time of `{other}`'s")
        parts.append(f"at {plural(int(threads), 'thread')}: " + ", ".join(spans))
    shapes, core = r["shapes"], numerics.PINNED_ENV["OPENBLAS_CORETYPE"]
    return (
        f"The pin's fp32 GEMMs (OpenBLAS's `{core}` kernel through numpy, under MKL's COMPATIBLE branch for "
        f"the rest) take, over {len(shapes)} shapes from {'x'.join(map(str, shapes[0]))} to "
        f"{'x'.join(map(str, shapes[-1]))}, {'; '.join(parts)} (MKL branches by `MKL_CBWR`; GFLOP/s, medians "
        f"of {r['rounds']} interleaved rounds). Measured at {measured_at(r, 'end')}."
    )
