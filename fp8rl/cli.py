"""The `fp8rl` command. Every Snakemake rule calls one of its subcommands.

Each area registers its subcommands from a module in `fp8rl/commands/`; heavy imports (torch, pandas)
happen inside the handlers so that `fp8rl matrix` answers instantly. Bad input (a `ConfigError` or a
`UsageError`) is printed without a traceback and exits 2. A command whose config asks for the other
numerics mode than the process runs (`fp8rl.numerics`) restarts itself in that mode. `fp8rl --version`
prints the installed package's version; `fp8rl.quiet` drops two harmless import-time log lines of
torchao before any command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
import textwrap

from fp8rl import numerics, quiet
from fp8rl.commands.common import EXIT_CODES, UsageError, describe, resolve_config_arg
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
    "fp8rl.commands.check",
    "fp8rl.commands.decide",
    "fp8rl.commands.quotes",
    "fp8rl.commands.archive",
]


def package_version() -> str:
    """The installed distribution's version (pyproject's `version`), or `unknown` outside an install."""
    try:
        return importlib.metadata.version("fp8rl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fp8rl",
        description=describe(
            "fp8rl",
            "Benchmark and reproducibility harness for fully-FP8 RL of LLMs. `fp8rl COMMAND --help` says "
            "what a command reads and writes, with an example, and its exit codes.",
        ),
        epilog=textwrap.fill(EXIT_CODES, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        resolve_config_arg(args)
        return int(args.func(args) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except numerics.ModeMismatch as exc:
        if argv is not None:  # called in-process (tests, scripts): the libraries cannot switch here
            print(f"error: {exc}", file=sys.stderr)
            return 2
        # The `fp8rl` command itself: start again in the config's mode (fp8rl.numerics).
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "fp8rl.cli", *sys.argv[1:]], exc.env())
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
