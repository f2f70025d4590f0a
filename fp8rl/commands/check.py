"""`fp8rl check RESULTS --against PUBLISHED`: metric-gated recipes, as NeMo-RL gates its recipes.

A fresh tier run's per-cell metrics (its report's `tables/comparison.csv`: one row per algo / model /
granularity / [condition] / variant) are compared with the published report's. Each metric that the
published table gives with a 95 % interval (the t-interval over its per-seed means: fp8rl.stats.intervals)
has a band: that interval, widened about the published mean by
`--widen` (1: the interval itself), plus `--atol` for the table's rounding. The fresh mean must lie in it.
A published cell missing from the fresh table fails too. The output states every band; the exit code is
1 naming each metric and variant that left its band (or each missing cell), 0 when all are inside, 2 on
a usage error, among them a published folder (or a fresh one with a `report.json`) whose files are not
the ones its manifest records (fp8rl.publication.publish.verify_publication), and a publication with no band
at all (a single seed gives no interval): nothing to check is not a pass. `.ci/run` runs it on the CI
tier, so a change that silently alters the science fails CI.
"""

from __future__ import annotations

import argparse
import sys

from fp8rl.commands.common import UsageError, add_command


def cmd_check(args: argparse.Namespace) -> int:
    from fp8rl.publication.bands import check

    try:
        lines, failures = check(args.results, args.against, widen=args.widen, atol=args.atol)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
    p = add_command(
        sub,
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
