"""`fp8rl report --config FILE` and `fp8rl publish --config FILE`: the DAG's last rules.

`publish` copies the tier's report, checked against its manifest, with provenance into
`{results_dir}/published/{tier}` (or `--out`); with the config it also checks that the report was built
from it. Without a config it takes the tier as `fp8rl publish TIER` (results under `--results-dir`,
default `results`); `fp8rl publish TIER --config FILE`, the older form, still works with a deprecation
notice (the config names the tier). A report that is missing, incomplete or tampered with, or held by a
running report, exits 2 with the problem.

Output file names are listed in `fp8rl/report/__init__.py` and docs/interfaces.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.config_loader import load_config

if TYPE_CHECKING:
    from fp8rl.config import ExperimentConfig


def cmd_report(args: argparse.Namespace) -> int:
    cfg = load_config(args.file, args.set)
    from fp8rl.run_files import runs_dir as tier_runs_dir

    runs_dir = tier_runs_dir(cfg.results_dir, cfg.tier)
    if args.runs_dir is not None:
        runs_dir = Path(args.runs_dir)
        if not runs_dir.is_dir():
            raise UsageError(f"--runs-dir {runs_dir}: not a directory")

    from fp8rl.locks import RunDirLocked
    from fp8rl.report.build import ReportPathError, build_report
    from fp8rl.report.paths import ReportPaths

    try:
        manifest = build_report(cfg, runs_dir)
    except (RunDirLocked, ReportPathError) as exc:
        raise UsageError(str(exc)) from None
    paths = ReportPaths.for_config(cfg)
    counts = ", ".join(f"{s} {n}" for s, n in manifest["status_counts"].items())
    print(f"report for tier {cfg.tier}: {counts}")
    if manifest["problems"]:
        print(f"{len(manifest['problems'])} data problem(s), listed in {paths.html}:", file=sys.stderr)
        for line in manifest["problems"][:10]:
            print(f"  {line}", file=sys.stderr)
    if manifest["notes"]:
        print(f"{len(manifest['notes'])} data note(s) (benign: zero-width intervals), listed in {paths.html}")
    print("\n".join(report_locations(cfg, runs_dir)))
    return 0


def report_locations(cfg: ExperimentConfig, runs_dir: Path | None = None) -> list[str]:
    """Where a tier's report is, one line each: its tables, plots, report.html and one-page SUMMARY.md,
    and, when the config logs to TensorBoard, the command that shows the runs' curves."""
    from fp8rl.report.paths import ReportPaths
    from fp8rl.run_files import runs_dir as tier_runs_dir

    paths = ReportPaths.for_config(cfg)
    lines = [
        f"tables:  {paths.tables_dir}/",
        f"plots:   {paths.plots_dir}/",
        f"report:  {paths.html}  (one page: {paths.summary})",
    ]
    if cfg.tracking.tensorboard:
        from fp8rl.tracking import tensorboard_command

        runs = runs_dir if runs_dir is not None else tier_runs_dir(cfg.results_dir, cfg.tier)
        lines.append(f"curves:  {tensorboard_command(runs)}")
    return lines


def dag_end_text(cfg: ExperimentConfig, since: float) -> str:
    """What the DAG prints when it ends well (the Snakefile's `onsuccess:`): the tier's comparison table
    and `report_locations`, when this DAG wrote the report (its report.json is not older than `since`, a
    POSIX time); else one line saying that the report was not rebuilt, and where it is if it exists."""
    from fp8rl.report.paths import ReportPaths

    paths = ReportPaths.for_config(cfg)
    try:
        built = paths.manifest.stat().st_mtime >= since
    except OSError:
        return f"no report yet: the DAG's default target writes it under {paths.root}/"
    if not built:
        return f"report not rebuilt by this run; the last one: {paths.html}"
    table = paths.table("comparison", "md")
    try:
        comparison = table.read_text(encoding="utf-8").rstrip("\n")
    except OSError as exc:
        comparison = f"({table}: {exc.strerror or exc})"
    return "\n".join([f"comparison ({table}):", "", comparison, "", *report_locations(cfg)])


def cmd_publish(args: argparse.Namespace) -> int:
    from fp8rl.config import tier_problem

    if args.tier is None and args.file is None:
        raise UsageError("give the tier's config, --config FILE (or, without a config, the TIER)")
    if args.tier is not None and (problem := tier_problem(args.tier)) is not None:
        raise UsageError(f"TIER: {problem}")
    if args.set and not args.file:
        raise UsageError("--set needs --config FILE")
    cfg = load_config(args.file, args.set) if args.file else None
    tier = args.tier or cfg.tier
    if cfg is not None and args.tier is not None:
        print(
            f"warning: `fp8rl publish TIER --config FILE` is deprecated; use `fp8rl publish --config {args.file}` "
            "(the config names the tier)",
            file=sys.stderr,
        )
    results_dir = args.results_dir or (cfg.results_dir if cfg else "results")

    from fp8rl.locks import RunDirLocked
    from fp8rl.publication.publish import PublishError, publish_tier

    try:
        dest = publish_tier(tier, results_dir, cfg, dest=args.out)
    except (PublishError, RunDirLocked) as exc:
        raise UsageError(str(exc)) from None
    print(f"published {tier} to {dest}/")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report", help="tables, plots and an HTML report of every run of a tier")
    add_config_args(p)
    p.add_argument("--runs-dir", help="read runs from here instead of {results_dir}/{tier}/runs")
    p.set_defaults(func=cmd_report)

    p = add_command(sub, "publish", help="copy a tier's report with provenance into results/published/TIER")
    p.add_argument(
        "tier",
        nargs="?",
        metavar="TIER",
        help="without --config: the tier to publish (its {results_dir}/TIER/ report), e.g. smoke, mechanism",
    )
    add_config_args(p, required=False)
    p.add_argument("--results-dir", help="default: the config's results_dir, else 'results'")
    p.add_argument(
        "--out",
        help="where to publish (default {results_dir}/published/TIER), e.g. results/published/ci for the "
        "CI tier, whose results_dir is results/ci",
    )
    p.set_defaults(func=cmd_publish)
