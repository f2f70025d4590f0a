"""Pieces shared by the subcommand modules: the parser of a subcommand (`add_command`: its --help
says what it does and its exit codes), the config arguments every command names the same way
(`add_config_args`), the errors and checks of run directories."""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap

from fp8rl.commands.usage import USAGE

EXIT_CODES = (
    "exit status: 0 when the command did its work; 2 on bad input found before any work started (a config "
    "or usage error, printed without a traceback); any other code is described in the command's help."
)
CONFIG_HELP = "experiment YAML, e.g. config/smoke.yaml"


class UsageError(Exception):
    """Bad input found before any work started: printed as is, exit code 2."""


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str) -> argparse.ArgumentParser:
    """Subcommand `name` of `sub`. `help` is its line in the parent's list; its own --help shows that
    line, then its text for users (`USAGE` of fp8rl.commands.usage: what it reads and writes, an
    example, its own exit codes), then `EXIT_CODES`."""
    parser = sub.add_parser(
        name,
        help=help,
        epilog=textwrap.fill(EXIT_CODES, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.description = describe(parser.prog, f"{help[0].upper()}{help[1:]}.")
    return parser


def describe(prog: str, head: str) -> str:
    """The --help description of the command `prog` (`fp8rl eval lm-eval`): `head`, then its USAGE text."""
    path = prog.split(" ", 1)[1] if " " in prog else ""
    return f"{textwrap.fill(head, 100)}\n\n{inspect.cleandoc(USAGE[path])}"


def add_config_args(
    p: argparse.ArgumentParser, *, required: bool = True, legacy_positional: bool = False
) -> None:
    """`--config FILE` (the experiment config; `args.file`) and repeatable `--set KEY=VALUE`, the same
    in every command. `required`: the command needs a config. `legacy_positional`: the command's older
    form took the config as a positional FILE; it still does, with a deprecation notice on stderr
    (`resolve_config_arg`)."""
    if legacy_positional:
        p.add_argument("--config", dest="file", metavar="FILE", help=CONFIG_HELP)
        p.add_argument("legacy_file", nargs="?", metavar="FILE", help="deprecated: use --config FILE")
        p.set_defaults(config_command=p.prog, config_required=required)
    else:
        p.add_argument("--config", dest="file", metavar="FILE", required=required, help=CONFIG_HELP)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set schedule.steps=3 (repeatable)",
    )


def resolve_config_arg(args: argparse.Namespace) -> None:
    """Move a config given in a command's older positional form into `args.file`, with a deprecation
    notice on stderr; UsageError when it is given both ways, or not at all where the command needs it."""
    legacy = getattr(args, "legacy_file", None)
    if legacy is not None:
        if args.file is not None:
            raise UsageError(
                f"the config is given twice ({legacy} and --config {args.file}): give --config only"
            )
        print(
            f"warning: `{args.config_command} FILE` is deprecated; use `{args.config_command} --config {legacy}`",
            file=sys.stderr,
        )
        args.file = legacy
    if getattr(args, "config_required", False) and args.file is None:
        raise UsageError(f"{args.config_command}: --config FILE is required")


def model_arg(cfg, args):
    """The config's model named by `--model`; UsageError listing the defined ones otherwise."""
    try:
        return cfg.model(args.model)
    except KeyError:
        names = ", ".join(m.name for m in cfg.models)
        raise UsageError(f"--model {args.model}: not defined in {args.file} (models: {names})") from None


def refuse_foreign_run_dir(run_dir, run_id: str) -> None:
    """UsageError if any file of `run_dir` (a RunDir) names another run than `run_id` (`run.json`,
    `summary.json`, `checkpoint/state.json`): two runs' files never mix."""
    from fp8rl.run_checks import owner_problems

    if foreign := owner_problems(run_dir, run_id):
        raise UsageError(
            f"{run_dir.root}: another run's directory ({foreign[0]}); use another --out, or delete it first"
        )


def claim_run_dir(run_dir, run_id: str) -> None:
    """Make `run_dir` (a RunDir, held locked, checked with `refuse_foreign_run_dir`) `run_id`'s: write its
    `run.json` when it has none, and remove the temp files killed writers left in it."""
    from fp8rl.io import remove_stale_temps

    run_dir.claim(run_id)
    remove_stale_temps(run_dir.root)
