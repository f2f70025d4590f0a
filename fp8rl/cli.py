"""The `fp8rl` command. Every Snakemake rule calls one of its subcommands.

Each area registers its subcommands from a module in `fp8rl/commands/`; heavy imports (torch, pandas)
happen inside the handlers so that `fp8rl matrix` answers instantly. Bad input (a `ConfigError` or a
`UsageError`) is printed without a traceback and exits 2. `fp8rl --version` prints the installed
package's version; `fp8rl.quiet` drops two harmless import-time log lines of torchao before any command
runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

from fp8rl import quiet
from fp8rl.commands.common import UsageError
from fp8rl.config_loader import ConfigError

# One module per area; each defines `register(subparsers)`.
COMMAND_MODULES = [
    "fp8rl.commands.config",
    "fp8rl.commands.report",
    "fp8rl.commands.evaluate",
    "fp8rl.commands.data",
    "fp8rl.commands.train",
    "fp8rl.commands.study",
    "fp8rl.commands.containers",
    "fp8rl.commands.verl",
]


def package_version() -> str:
    """The installed distribution's version (pyproject's `version`), or `unknown` outside an install."""
    try:
        return importlib.metadata.version("fp8rl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fp8rl", description="Benchmark and reproducibility harness for fully-FP8 RL of LLMs."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet.install()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
