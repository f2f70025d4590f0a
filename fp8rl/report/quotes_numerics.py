"""The numerics figures README.md and docs/performance.md quote (fp8rl.report.quotes): which kernel path
each published tier's runs took (the runs' own record in its `report.json`), and what the pin costs in
fp32 GEMMs, from the record `benchmarks/gemm_paths.py --json` writes (published as
`results/published/benchmarks/gemm_paths.json`)."""

from __future__ import annotations

import json
from pathlib import Path

from fp8rl import numerics
from fp8rl.report.quote_format import QuoteError, markdown_table, num, quoted_block
from fp8rl.report.quotes_performance import benchmark_record, commit_and_machine

GEMM_RECORD = Path("benchmarks") / "gemm_paths.json"


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
    pinned_gemms = [f"OpenBLAS {numerics.PINNED_ENV['OPENBLAS_CORETYPE']}"]
    if runs["mkl"] == [numerics.PINNED_ENV["MKL_CBWR"]]:
        if runs.get("gemms") == pinned_gemms:
            return "today's pin: reproduces on any x86-64 CPU with AVX2"
        return "the pin before the OpenBLAS kernel (GEMMs on MKL's COMPATIBLE branch): to be re-run under today's"
    return "an earlier pin: reproduces only on a CPU like that one; to be re-run under today's"


@quoted_block("numerics-pins")
def numerics_pins(published: Path) -> str:
    """One row per published tier: when, on which CPU, under which MKL branch and on which GEMM kernel its
    runs ran, and whether
    that is the pin of this code (a re-run from a clean clone reproduces its tables only then)."""
    rows = []
    for report in sorted(published.glob("*/report.json")):
        prov = json.loads((report.parent / "provenance.json").read_text(encoding="utf-8"))
        runs = tier_numerics(report.parent)
        rows.append(
            [
                f"`{report.parent.name}`",
                str(prov.get("published", "?"))[:10],
                ", ".join(runs.get("cpus", [])) or "?",
                ", ".join(f"`{b}`" for b in runs["mkl"]),
                ", ".join(runs.get("gemms") or ["MKL (not recorded)"]),
                _kernel_path(runs),
            ]
        )
    if not rows:
        raise QuoteError(f"{published}: no */report.json (nothing published)")
    return markdown_table(["tier", "published", "CPU", "MKL branch", "GEMMs", "kernel path"], rows)


@quoted_block("performance-gemm-paths")
def performance_gemm_paths(published: Path) -> str:
    """Per thread count, the range over the grid of the pin's fp32 GEMM time (the pinned OpenBLAS kernel)
    over each other path's (MKL's COMPATIBLE branch, its AVX2 branch, the CPU's own AUTO), with where it
    was measured (above 1: the pin is slower)."""
    record = benchmark_record(published, GEMM_RECORD, "gemm_paths.py", "gflops")
    names = list(record["paths"])
    pin, others = names[0], names[1:]
    if pin != record.get("pin") or not record["paths"][pin]["pinned_blas"]:
        raise QuoteError(
            f"{published / GEMM_RECORD}: its first path {pin!r} is not the pinned OpenBLAS kernel"
        )
    parts = []
    for threads, grid in record["gflops"].items():
        spans = []
        for other in others:
            ratios = [o / p for o, p in zip(grid[other], grid[pin], strict=True)]
            spans.append(f"{num(min(ratios))}–{num(max(ratios))}× the time of `{other}`'s")
        parts.append(f"at {threads} thread{'s' if threads != '1' else ''}: " + ", ".join(spans))
    commit, where = commit_and_machine(record)
    shapes = record["shapes"]
    core = numerics.PINNED_ENV["OPENBLAS_CORETYPE"]
    return (
        f"The pin's fp32 GEMMs (OpenBLAS's `{core}` kernel through numpy, under MKL's COMPATIBLE branch for "
        f"the rest) take, over {len(shapes)} shapes from {'x'.join(map(str, shapes[0]))} to "
        f"{'x'.join(map(str, shapes[-1]))}, {'; '.join(parts)} (MKL branches by `MKL_CBWR`; GFLOP/s, medians "
        f"of {record['rounds']} interleaved rounds). Measured at commit {commit} on {where} (1-minute load "
        f"average {num(record['load_average_end'][0])} at the end)."
    )
