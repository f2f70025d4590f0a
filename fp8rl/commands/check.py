"""`fp8rl check RESULTS --against PUBLISHED`: metric-gated recipes, as NeMo-RL gates its recipes.

A fresh tier run's per-cell metrics (its report's `tables/comparison.csv`: one row per algo / model /
granularity / [condition] / variant) are compared with the published report's. Each metric that the
published table gives with a 95 % interval (the t-interval over its per-seed means: fp8rl.report.stats)
has a band: that interval, widened about the published mean by
`--widen` (1: the interval itself), plus `--atol` for the table's rounding. The fresh mean must lie in it.
A published cell missing from the fresh table fails too. The output states every band; the exit code is
1 naming each metric and variant that left its band (or each missing cell), 0 when all are inside, 2 on
a usage error. `.ci/run` runs it on the CI tier, so a change that silently alters the science fails CI.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from fp8rl.commands.common import UsageError

TABLE = Path("tables") / "comparison.csv"
KEYS = ("algo", "model", "granularity", "condition", "variant")


def _read(root: str) -> tuple[list[str], dict[tuple, dict[str, str]]]:
    path = Path(root) / TABLE
    if not path.is_file():
        raise UsageError(f"{path}: no comparison table (a tier's report directory holds {TABLE})")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        cols = list(reader.fieldnames or [])
        keys = [k for k in KEYS if k in cols]
        return keys, {tuple(row[k] for k in keys): row for row in reader}


def _num(text: str | None) -> float | None:
    try:
        x = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def banded_metrics(cols: list[str]) -> dict[str, str]:
    """metric -> the column of its mean, for every metric with a (non-delta) 95 % interval."""
    out = {}
    for c in cols:
        if c.endswith(" ci_low") and " delta" not in c:
            base = c[: -len(" ci_low")]
            mean = f"{base} mean" if f"{base} mean" in cols else base
            if mean in cols and f"{base} ci_high" in cols:
                out[base] = mean
    return out


def check(
    results: str, against: str, *, widen: float = 1.0, atol: float = 1e-9
) -> tuple[list[str], list[str]]:
    """(report lines, failures): every published cell's banded metrics against the fresh table."""
    keys, published = _read(against)
    fresh_keys, fresh = _read(results)
    if fresh_keys != keys:
        raise UsageError(f"{results} and {against} tabulate different cells ({fresh_keys} vs {keys})")
    with (Path(against) / TABLE).open(newline="") as fh:
        metrics = banded_metrics(next(csv.reader(fh)))
    lines = [
        f"band: the published 95 % interval over its seeds (t on the per-seed means), widened x{widen:g} "
        f"about the published mean, +- {atol:g}; {len(published)} published cells, {len(metrics)} metrics"
    ]
    failures = []
    for cell, row in published.items():
        name = "/".join(cell)
        if cell not in fresh:
            failures.append(f"{name}: missing from {results}")
            continue
        for metric, mean_col in metrics.items():
            mean, lo, hi = (_num(row.get(c)) for c in (mean_col, f"{metric} ci_low", f"{metric} ci_high"))
            if mean is None or lo is None or hi is None:
                continue
            band = (mean - widen * (mean - lo) - atol, mean + widen * (hi - mean) + atol)
            got = _num(fresh[cell].get(mean_col))
            inside = got is not None and band[0] <= got <= band[1]
            n = row.get(f"{metric} n", "")
            got_s = "absent" if got is None else f"{got:.6g}"
            line = f"{name} {metric}: {got_s} in [{band[0]:.6g}, {band[1]:.6g}] (published {mean:.6g}, n={n})"
            lines.append(("ok   " if inside else "OUT  ") + line)
            if not inside:
                failures.append(
                    f"{metric} of {name} left its band: {got_s} not in [{band[0]:.6g}, {band[1]:.6g}]"
                )
    extra = sorted(set(fresh) - set(published))
    if extra:
        lines.append(f"not published (not checked): {', '.join('/'.join(c) for c in extra)}")
    return lines, failures


def cmd_check(args: argparse.Namespace) -> int:
    lines, failures = check(args.results, args.against, widen=args.widen, atol=args.atol)
    for line in lines:
        print(line)
    if failures:
        for f in failures:
            print(f"FAIL {f}", file=sys.stderr)
        print(f"fp8rl check: {len(failures)} metric(s) outside the published bands", file=sys.stderr)
        return 1
    print(f"fp8rl check: every metric of {args.results} lies in the bands of {args.against}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="compare a fresh tier run's per-variant metrics with a published report's, within bands from "
        "the published seeds; exit 1 naming what left its band",
    )
    p.add_argument("results", help="the fresh tier's report directory (e.g. results/ci/smoke)")
    p.add_argument(
        "--against", required=True, help="the published report directory (e.g. results/published/ci)"
    )
    p.add_argument(
        "--widen", type=float, default=1.0, help="widen each published interval about its mean (1)"
    )
    p.add_argument("--atol", type=float, default=1e-9, help="absolute slack for the tables' rounding (1e-9)")
    p.set_defaults(func=cmd_check)
