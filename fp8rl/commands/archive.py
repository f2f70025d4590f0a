"""`fp8rl archive save|restore|status`: carry a tier's finished runs across machines in git
(fp8rl.run_archive), so a study longer than one session goes on where it stopped; `status` shows where
it stands without a result (fp8rl.run_progress)."""

from __future__ import annotations

import argparse
import json

from fp8rl.commands.common import UsageError, add_command, add_config_args


def cmd_archive(args: argparse.Namespace) -> int:
    from fp8rl.config_loader import load_config
    from fp8rl.evaluate.suites import enabled_suites
    from fp8rl.run_archive import (
        ArchiveError,
        describe_restore,
        describe_save,
        restore_archive,
        restore_bases_from,
        save_archive,
    )

    cfg = load_config(args.file, args.set)
    suites = tuple(s.name for s in enabled_suites(cfg))
    try:
        if args.archive_command == "save":
            print(describe_save(save_archive(cfg, suites)))
            return 0
        if args.archive_command == "status":
            from fp8rl.run_progress import describe_progress, tier_progress

            progress = tier_progress(cfg, suites)
            print(
                json.dumps(progress.as_json(), indent=2)
                if args.json
                else describe_progress(progress, args.file)
            )
            return 0
        result = restore_bases_from(cfg, args.bases_from) if args.bases_from else restore_archive(cfg)
    except ArchiveError as exc:
        raise UsageError(str(exc)) from None
    print(describe_restore(result))
    return 1 if result.refused else 0


def register(sub: argparse._SubParsersAction) -> None:
    p_archive = add_command(sub, "archive", help="keep a tier's finished runs in git and put them back")
    archive_sub = p_archive.add_subparsers(dest="archive_command", required=True, metavar="ACTION")
    for name, text in (
        ("save", "add the tier's finished runs to its run archive"),
        ("restore", "put the archived runs back into a results folder whose bases were rebuilt"),
        ("status", "where the tier's runs and bases stand, without reading a result"),
    ):
        p = add_command(archive_sub, name, help=text)
        add_config_args(p)
        p.set_defaults(func=cmd_archive, bases_from=None)
        if name == "status":
            p.add_argument("--json", action="store_true", help="every run's state as JSON")
        if name == "restore":
            p.add_argument(
                "--bases-from",
                metavar="TIER",
                help="put back only the bases this config's runs start from, out of TIER's run archive "
                "(their SFT digest must be this config's), so a study that continues TIER's trains on "
                "its bases; no run is restored",
            )
