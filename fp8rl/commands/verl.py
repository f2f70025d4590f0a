"""`fp8rl verl train|rehearse|overrides|import-metrics`: the paper tier's training through verl.

`fp8rl verl train` takes the arguments of `fp8rl train` (docs/interfaces.md) and writes the same run
directory: it checks that verl can run the cell, writes verl's inputs and job script, runs the script
(Ray across the Slurm allocation, verl, the HF checkpoint), then imports verl's log and writes the
summary and throughput files (fp8rl.adapters.verl_run). It exits 1 when the run failed, so the DAG
resubmits the job, except on its last attempt (`--on-failure record`) and when this attempt failed as
the one before did (same step, same reason): then summary.json records `failed` and it exits 0.
`--dry-run` stops before running it. Like
`fp8rl train`, it holds the run directory locked throughout (`RunDir.lock`): a second one on the same
`--out` exits 2 naming the holder.

`fp8rl verl rehearse` runs every job type of the config's DAG on a CPU machine (a login node) as far
as a CPU allows (fp8rl.adapters.rehearse_jobs): the training jobs' real job scripts to verl's first GPU
request and past it (fp8rl.adapters.verl_rehearse), the other jobs in their images' pinned packages.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from fp8rl.commands.common import (
    UsageError,
    add_command,
    add_config_args,
    claim_run_dir,
    refuse_foreign_run_dir,
)


def _setup(args: argparse.Namespace):
    from fp8rl.adapters.verl_model import AdapterError
    from fp8rl.adapters.verl_support import check_verl_support
    from fp8rl.config.runs import find_run
    from fp8rl.config_loader import load_config

    cfg = load_config(args.file, args.set)
    try:
        spec = find_run(cfg, args.run)
        check_verl_support(cfg, spec)
    except (ValueError, AdapterError) as exc:
        raise UsageError(str(exc)) from None
    return cfg, spec


def _paths(cfg, spec, args: argparse.Namespace):
    from fp8rl.adapters.verl_run import verl_paths

    try:
        return verl_paths(cfg, spec, args.out, args.base)
    except ValueError as exc:  # --base not a folder of this model, a record's snapshot missing
        raise UsageError(str(exc)) from None


def cmd_overrides(args: argparse.Namespace) -> int:
    from fp8rl.adapters.verl_overrides import overrides_json, verl_overrides

    cfg, spec = _setup(args)
    paths = _paths(cfg, spec, args)
    if args.json:
        print(overrides_json(cfg, spec, paths))
    else:
        print("\n".join(verl_overrides(cfg, spec, paths)))
    return 0


def cmd_import_metrics(args: argparse.Namespace) -> int:
    from fp8rl.adapters.verl_metrics import import_log

    if not Path(args.log).is_file():
        raise UsageError(f"{args.log}: no such verl log")
    try:
        rows = import_log(args.log, args.out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.out}: {len(rows)} steps")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from fp8rl.locks import RunDirLocked
    from fp8rl.run_files import RunDir

    cfg, spec = _setup(args)
    paths = _paths(cfg, spec, args)
    try:
        with RunDir(paths.out).lock():
            return _train_locked(args, cfg, spec, paths)
    except RunDirLocked as exc:
        raise UsageError(str(exc)) from None


def _train_locked(args: argparse.Namespace, cfg, spec, paths) -> int:
    """Write verl's inputs, run the job script and import its log, with the run directory locked."""
    from fp8rl.adapters.verl_run import failed_alike, finish_run, run_script, write_run_files
    from fp8rl.run_files import RunDir

    refuse_foreign_run_dir(RunDir(paths.out), spec.run_id)
    try:
        script = write_run_files(
            cfg, spec, paths, data=Path(args.data),
            reference=Path(args.reference) if args.reference else None, extra_overrides=args.override,
        )  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    claim_run_dir(RunDir(paths.out), spec.run_id)
    if args.dry_run:
        print(script.read_text())
        return 0
    summary = finish_run(cfg, spec, paths.out, exit_code=run_script(script), base_model=paths.model)
    status, reason = summary["status"], summary["reason"]
    print(f"{spec.run_id}: {status}" + (f" ({reason})" if reason else ""), file=sys.stderr)
    if status != "failed":
        return 0
    if args.on_failure == "record" or failed_alike(paths.out):
        why = "the last attempt" if args.on_failure == "record" else "the same failure twice in a row"
        print(f"{spec.run_id}: failed for good ({why}): summary.json records it", file=sys.stderr)
        return 0
    return 1


def cmd_rehearse(args: argparse.Namespace) -> int:
    """Rehearse the config's job types (`--jobs`; fp8rl.adapters.rehearse_jobs), one outcome line each."""
    import tempfile

    from fp8rl.adapters.rehearse_jobs import Context, planned, rehearse_jobs
    from fp8rl.adapters.verl_model import AdapterError
    from fp8rl.adapters.verl_rehearse import job_types
    from fp8rl.adapters.verl_support import check_verl_support
    from fp8rl.config.runs import find_run
    from fp8rl.config_loader import load_config

    cfg = load_config(args.file, args.set)
    try:
        specs = [find_run(cfg, r) for r in args.run] if args.run else job_types(cfg)
        for spec in specs:
            check_verl_support(cfg, spec)
    except (ValueError, AdapterError) as exc:
        raise UsageError(str(exc)) from None
    names = [j.name for j in planned(cfg)]
    if args.jobs:
        wanted = [n.strip() for n in args.jobs.split(",") if n.strip()]
    else:  # `--run` alone: those training jobs
        wanted = ["train"] if args.run else names
    if unknown := [n for n in wanted if n not in names]:
        raise UsageError(
            f"--jobs: {', '.join(unknown)} is not a job type of {args.file} ({', '.join(names)})"
        )
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="fp8rl-rehearsal-"))
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        cfg, Path(args.file).resolve(), list(args.set), work, specs,
        base=Path(args.base).resolve() if args.base else None,
        data=Path(args.data).resolve() if args.data else None, overrides=list(args.override),
        timeout_s=args.timeout, echo=lambda line: print(line, flush=True),
    )  # fmt: skip
    outcomes = rehearse_jobs(ctx, wanted)
    counts = {s: [o.job for o in outcomes if o.status == s] for s in ("ok", "skipped", "failed")}
    print(
        "job types: "
        + "; ".join(f"{s} {len(j)}" + (f" ({', '.join(j)})" if j else "") for s, j in counts.items())
        + f" [{work}]",
        flush=True,
    )
    return 1 if counts["failed"] else 0


REHEARSE_EPILOG = """\
job types (--jobs; by default all of the config's, in this order; the DAG rules each stands for):
{jobs}
"""


def _run_args(p: argparse.ArgumentParser) -> None:
    add_config_args(p)
    p.add_argument("--run", required=True, help="run id, algo/model/variant/granularity/seedN")


def register(sub: argparse._SubParsersAction) -> None:
    p_v = add_command(sub, "verl", help="train a paper-tier run through verl (Ray, Megatron, vLLM)")
    v_sub = p_v.add_subparsers(dest="verl_command", required=True, metavar="ACTION")

    p = add_command(v_sub, "train", help="train one run through verl; same arguments as `fp8rl train`")
    _run_args(p)
    p.add_argument("--base", required=True, help="base model directory (HF format), else the model's hf_id")
    p.add_argument("--data", required=True, help="directory with train.jsonl and test.jsonl")
    p.add_argument("--out", required=True, help="the run directory")
    p.add_argument("--reference", help="the matching bf16 run directory (calib.reference: run)")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="extra Hydra override"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="write the files and print the job script; run nothing"
    )
    p.add_argument("--no-progress", action="store_true", help="accepted for `fp8rl train` compatibility")
    p.add_argument(
        "--on-failure",
        choices=("raise", "record"),
        default="raise",
        help="when the run fails: exit 1 so the job is resubmitted (raise; also exit 0 when this attempt "
        "failed at the same step with the same reason as the one before), or exit 0 with summary.json "
        "recording it (record; the DAG's last attempt of a training job)",
    )
    p.set_defaults(func=cmd_train)

    from fp8rl.adapters.rehearse_jobs import JOB_TYPES

    jobs = "\n".join(
        textwrap.fill(f"{j.name:<11} {j.summary} ({', '.join(j.rules)})", 100, initial_indent="  ",
                      subsequent_indent=" " * 14)
        for j in JOB_TYPES.values()
    )  # fmt: skip
    p = add_command(
        v_sub,
        "rehearse",
        help="rehearse every job type of the config on this CPU machine, each as far as a CPU allows",
    )
    p.epilog = REHEARSE_EPILOG.format(jobs=jobs) + "\n" + p.epilog
    add_config_args(p)
    p.add_argument(
        "--jobs", metavar="JOB[,JOB...]", help="the job types to rehearse, comma-separated (default: all)"
    )
    p.add_argument(
        "--run", action="append", default=[],
        help="train: rehearse this run id (repeatable; without --jobs, only these training jobs)",
    )  # fmt: skip
    p.add_argument("--base", help="base model directory (HF format; default: a stand-in model)")
    p.add_argument("--data", help="train: directory with train.jsonl and test.jsonl (default: stand-in)")
    p.add_argument("--out", help="working directory (default: a new temporary one)")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="train: extra Hydra override"
    )
    p.add_argument(
        "--timeout", type=int, default=900, help="seconds per train job and per fetch command (default 900)"
    )
    p.set_defaults(func=cmd_rehearse)

    p = add_command(v_sub, "overrides", help="print verl's Hydra overrides for one run")
    _run_args(p)
    p.add_argument("--base", help="base model directory (default: the model's hf_id)")
    p.add_argument("--out", default="RUN_DIR", help="the run directory the paths point into")
    p.add_argument("--json", action="store_true", help="overrides, loss spec and deviations as JSON")
    p.set_defaults(func=cmd_overrides)

    p = add_command(v_sub, "import-metrics", help="verl's file-logger JSONL -> fp8rl metrics.jsonl")
    p.add_argument("log", help="verl's log (VERL_FILE_LOGGER_PATH)")
    p.add_argument("--out", required=True, help="metrics.jsonl to write")
    p.set_defaults(func=cmd_import_metrics)
