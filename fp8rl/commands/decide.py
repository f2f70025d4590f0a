"""`fp8rl decide acceptance|failure-search --config FILE`: the two rules a study tier registers in its
config and reads before it goes on, each printed as JSON with an exit code a script can branch on.

- `acceptance` (the config's `acceptance` section, fp8rl.report.acceptance.check_acceptance): is the
  testbed fit for FP8 runs, judged on its bf16 runs alone? Reads the run folders; exit 1 names the
  criteria missed.
- `failure-search` (the config's `failure_search` section, fp8rl.report.failure_search.decide): at which
  mismatch setting does the decisive arm first fail? Reads the built report's tables; exit 1 while the
  search is incomplete (nothing is decided then).

Both exit 2 on a config without the section, or (failure-search) before the report is built.
"""

from __future__ import annotations

import argparse
import json
import sys

from fp8rl.commands.common import add_command, add_config_args
from fp8rl.config_loader import load_config


def cmd_acceptance(args: argparse.Namespace) -> int:
    from fp8rl.report.acceptance import check_acceptance

    try:
        result = check_acceptance(load_config(args.file, args.set))
    except ValueError as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 1 if result["missed"] else 0


def cmd_failure_search(args: argparse.Namespace) -> int:
    from fp8rl.report.failure_search import decide

    try:
        result = decide(load_config(args.file, args.set), args.tables)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0 if result["complete"] else 1


def register(sub: argparse._SubParsersAction) -> None:
    p_decide = add_command(sub, "decide", help="read a study's registered rule: acceptance or failure search")
    decide_sub = p_decide.add_subparsers(dest="decide_command", required=True, metavar="RULE")
    p = add_command(decide_sub, "acceptance", help="judge a testbed's acceptance on its bf16 runs")
    add_config_args(p)
    p.set_defaults(func=cmd_acceptance)
    p = add_command(decide_sub, "failure-search", help="decide a failure search from the tier's report")
    add_config_args(p)
    p.add_argument(
        "--tables", metavar="DIR", help="a tables/ folder (default: the tier's, under results_dir)"
    )
    p.set_defaults(func=cmd_failure_search)
