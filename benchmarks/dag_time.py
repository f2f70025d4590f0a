"""Where a tier's DAG spent its time, from Snakemake's own job records (`benchmark:` files).

Every rule of the DAG writes `{results_dir}/{tier}/benchmarks/<rule>/.../<job>.tsv` when its job ends
(Snakemake's `benchmark` directive: wall seconds `s`, CPU seconds `cpu_time`, peak memory). This script
sums them per rule and, from each file's modification time (the job's end) minus its `s` (its start),
gives each rule's span: the wall time from its first job's start to its last job's end, with other
rules' jobs running beside it (the local profile runs as many jobs as there are cores). For the stress
tier's target, "minutes of training" is the `train` rule's span.

    python benchmarks/dag_time.py results/stress [--json results/benchmarks/stress_dag.json]

Run it on a DAG run from scratch (a rerun that skipped finished jobs keeps their old records and
spans). The record (`--json`) carries the provenance (commit, CPU, load average now).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path


def job_records(tier_dir: Path) -> dict[str, list[tuple[float, float, float]]]:
    """`{rule: [(start, end, cpu seconds), ...]}` from the tier's Snakemake benchmark files."""
    root = tier_dir / "benchmarks"
    if not root.is_dir():
        raise SystemExit(f"{root}: no Snakemake benchmark records (run the tier's DAG first)")
    out: dict[str, list[tuple[float, float, float]]] = {}
    for path in sorted(root.rglob("*.tsv")):
        rule = path.relative_to(root).parts[0]
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            raise SystemExit(f"{path}: empty benchmark record")
        end, seconds = path.stat().st_mtime, float(rows[-1]["s"])
        cpu = float(rows[-1].get("cpu_time") or "nan")
        out.setdefault(rule, []).append((end - seconds, end, cpu))
    if not out:
        raise SystemExit(f"{root}: no benchmark records")
    return out


def summarize(records: dict[str, list[tuple[float, float, float]]]) -> dict:
    rules = {}
    for rule, jobs in sorted(records.items()):
        rules[rule] = {
            "jobs": len(jobs),
            "seconds_summed": round(sum(e - s for s, e, _ in jobs), 1),
            "cpu_seconds_summed": round(sum(c for *_, c in jobs), 1),
            "span_seconds": round(max(e for _, e, _ in jobs) - min(s for s, _, _ in jobs), 1),
        }
    every = [j for jobs in records.values() for j in jobs]
    return {
        "rules": rules,
        "span_seconds": round(max(e for _, e, _ in every) - min(s for s, _, _ in every), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tier_dir", type=Path, help="{results_dir}/{tier}, e.g. results/stress")
    p.add_argument("--json", type=Path, help="also write the record there (with provenance)")
    a = p.parse_args(argv)
    summary = summarize(job_records(a.tier_dir))
    print(f"{'rule':<14} {'jobs':>5} {'summed s':>9} {'cpu s':>9} {'span s':>8}")
    for rule, r in summary["rules"].items():
        print(
            f"{rule:<14} {r['jobs']:>5} {r['seconds_summed']:>9.1f} {r['cpu_seconds_summed']:>9.1f} {r['span_seconds']:>8.1f}"
        )
    print(
        f"the whole DAG: {summary['span_seconds'] / 60:.1f} min from the first job's start to the last job's end"
    )
    if a.json:
        from fp8rl.io import atomic_write_json
        from fp8rl.provenance import provenance

        record = {"benchmark": "dag_time", "tier_dir": str(a.tier_dir), **summary,
                  "load_average_end": os.getloadavg(), "provenance": provenance()}  # fmt: skip
        atomic_write_json(a.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
