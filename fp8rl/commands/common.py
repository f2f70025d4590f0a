"""Pieces shared by the subcommand modules."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad input found before any work started: printed as is, exit code 2."""


def add_config_args(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """The experiment config argument (positional FILE, or --config FILE) and repeatable --set."""
    if positional:
        p.add_argument("file", help="experiment YAML, e.g. config/smoke.yaml")
    else:
        p.add_argument("--config", dest="file", required=True, help="experiment YAML, e.g. config/smoke.yaml")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set schedule.steps=3 (repeatable)",
    )


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
