"""`fp8rl quotes`: regenerate (`--write`) or check (`--check`) the result figures that README.md and
docs/ quote from the published tables (fp8rl.quotes.files), each publication first checked against
its `report.json` manifest (a tampered one: exit 2 naming the file)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fp8rl.commands.common import UsageError, add_command


def cmd_quotes(args: argparse.Namespace) -> int:
    from fp8rl.quotes.files import QUOTING_FILES, QuoteError, render, stale_blocks, verify_publications

    root, published = Path(args.root), Path(args.published or Path(args.root) / "results" / "published")
    try:
        if args.write:
            from fp8rl.io import atomic_write_text

            verify_publications(published)
            changed = {}  # every file rendered before any is written: a bad block leaves all as they were
            for name in QUOTING_FILES:
                path = root / name
                if path.is_file():
                    text = path.read_text(encoding="utf-8")
                    new = render(text, published, name)
                    if new != text:
                        changed[name] = new
            for name, new in changed.items():
                atomic_write_text(root / name, new)
                print(f"updated {name}")
            return 0
        stale = stale_blocks(root, published)
    except QuoteError as exc:
        raise UsageError(str(exc)) from None
    if stale:
        print(
            "quoted results differ from the published tables (run `fp8rl quotes --write`):", file=sys.stderr
        )
        for s in stale:
            print(f"  {s}", file=sys.stderr)
        return 1
    print("every quoted result matches its published table")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "quotes", help="check or regenerate the result figures README.md and docs/ quote")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 naming every block that differs")
    mode.add_argument("--write", action="store_true", help="rewrite the blocks from the tables")
    p.add_argument("--root", default=".", help="the repository root (default: .)")
    p.add_argument("--published", help="default: ROOT/results/published")
    p.set_defaults(func=cmd_quotes)
