"""`fp8rl sft`, `fp8rl model`, `fp8rl train`: the reference trainer's commands (`fp8rl data`:
fp8rl.commands.data) (docs/interfaces.md). `sft` builds a scratch model's base directory, `model` a
pretrained one's.

Arguments are checked before any work starts (a missing directory, a run id outside the config's
matrix, an unknown task level, a base model that is not the config's, a data row that is malformed or
longer than the model's positions: exit 2 with the problem named; fp8rl.engine.inputs). `fp8rl train` holds its run directory
locked for the whole run (`RunDir.lock`: a second trainer on the same `--out` exits 2 naming the
holder), refuses with exit 2 a directory whose files name another run id (`run.json`, `summary.json`,
`checkpoint/state.json`: two runs' files never mix) and writes `run.json` into it, and refuses with
exit 2 to resume a checkpoint whose `metrics.jsonl` is gone, damaged or a symbolic link
(`fp8rl.run_checks.resume_problem`). It exits 0 for a finished or a diverged run (summary.json says
which) and non-zero when it crashes (status `failed`). On SIGTERM (a Slurm job at its time limit, or
`scancel`) it finishes the step in progress, writes a checkpoint and exits 143 (128 + SIGTERM) without a
summary: the run is unfinished, and the next `fp8rl train` on it resumes after that step
(fp8rl.engine.stop).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fp8rl import numerics
from fp8rl.commands.common import (
    UsageError,
    add_command,
    add_config_args,
    claim_run_dir,
    model_arg,
    refuse_foreign_run_dir,
)
from fp8rl.config import ExperimentConfig
from fp8rl.config_loader import load_config
from fp8rl.engine.tasks import config_problems


def _require_dir(path: str, what: str, flag: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{flag} {path}: {what} not found")
    return p


def _config(args: argparse.Namespace) -> ExperimentConfig:
    """The config of `--config`/`--set`, checked for the reference trainer, its numerics mode in force."""
    cfg = load_config(args.file, args.set, checks=[config_problems])
    numerics.ensure(cfg.numerics)
    return cfg


def _data_dir(args: argparse.Namespace) -> Path:
    """`--data`: the directory `fp8rl data` wrote, with its train.jsonl."""
    data = _require_dir(args.data, "data directory", "--data")
    if not (data / "train.jsonl").is_file():
        raise UsageError(f"--data {args.data}: no train.jsonl (run `fp8rl data` first)")
    return data


def _base_dir(args: argparse.Namespace) -> Path:
    """`--base`: a model directory, as `fp8rl sft` or `fp8rl model` writes one."""
    base = _require_dir(args.base, "base model directory", "--base")
    if not (base / "config.json").is_file():
        raise UsageError(
            f"--base {args.base}: not a model directory (no config.json; run `fp8rl sft` or `fp8rl model` first)"
        )
    return base


def cmd_sft(args: argparse.Namespace) -> int:
    from fp8rl.engine.sft import SFTStopUnmet, run_sft

    cfg = _config(args)
    mcfg = model_arg(cfg, args)
    if mcfg.source != "scratch":
        raise UsageError(
            f"--model {args.model}: source {mcfg.source!r}; fp8rl sft builds scratch models only "
            "(`fp8rl model` prepares pretrained ones)"
        )
    data = _data_dir(args)
    if args.seed is not None and not cfg.sft.per_seed:
        raise UsageError(f"--seed {args.seed}: the config shares one base model (sft.per_seed: false)")
    if args.seed is None and cfg.sft.per_seed:
        raise UsageError("--seed: the config trains one base model per RL seed (sft.per_seed: true); name it")
    if args.seed is not None and cfg.sft.bases is not None and not 0 <= args.seed < cfg.sft.bases:
        raise UsageError(
            f"--seed {args.seed}: the config trains sft.bases = {cfg.sft.bases} bases, seeds 0 .. {cfg.sft.bases - 1}"
        )
    from fp8rl.engine.inputs import check_sft_data

    try:
        check_sft_data(cfg, args.model, data)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        info = run_sft(cfg, args.model, data, args.out, seed=args.seed, progress=not args.no_progress)
    except SFTStopUnmet as exc:  # the stop rule's failure branch: named, nothing written, exit 1
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if info.get("stop_met") is False:
        print(f"note: kept a base that missed sft.stop_at_accuracy (sft.on_unmet_stop: keep) -> {args.out}")
    # sft.steps: 0 saves the random-init model: there is no loss to report.
    loss = "no SFT steps (random init)" if info["loss/final"] is None else f"loss {info['loss/final']:.3f}"
    print(
        f"sft {args.model}: {info['parameters']} parameters, {loss}, "
        f"test accuracy greedy {info['acc/test_greedy']:.3f} sampled {info['acc/test_sampled']:.3f}, "
        f"{info['seconds']:.1f}s -> {args.out}"
    )
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from fp8rl.engine.pretrained import prepare_base

    cfg = _config(args)
    mcfg = model_arg(cfg, args)
    if mcfg.source == "scratch":
        raise UsageError(f"--model {args.model}: a scratch model; its base directory comes from `fp8rl sft`")
    try:
        info = prepare_base(cfg, args.model, args.out)
    except ValueError as exc:  # e.g. the weights package is not installed
        raise UsageError(f"--model {args.model}: {exc}") from None
    print(
        f"model {args.model}: {info['architecture']}, {info['parameters']} parameters, "
        f"{info['seconds']:.1f}s -> {args.out}"
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from fp8rl.config import find_run, resolve_run

    cfg = _config(args)
    try:
        run = resolve_run(cfg, find_run(cfg, args.run))
    except ValueError as exc:
        raise UsageError(f"--run: {exc}") from None
    base = _base_dir(args)
    data = _data_dir(args)
    from fp8rl.engine.inputs import check_base, check_base_seed, check_train_data

    try:  # the base model and every data row, before anything is loaded or written
        check_train_data(cfg, base, data, check_base(cfg, run.spec.model, base))
        check_base_seed(cfg, run.spec, base)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if run.needs_reference and not args.reference:
        raise UsageError(
            f"--reference: run {run.run_id} calibrates against a bf16 run (calib.reference: run); pass its run directory"
        )
    run_targets = None
    if run.needs_reference:
        from fp8rl.calibration_targets import reference_targets_by_step
        from fp8rl.rl.calibration import centred_window

        try:
            run_targets = centred_window(
                reference_targets_by_step(args.reference, run.calib.population), run.calib.run_window
            )
        except ValueError as exc:
            raise UsageError(f"--reference {exc}") from None
    from fp8rl.engine.stop import Interrupted, StopRequest
    from fp8rl.locks import RunDirLocked
    from fp8rl.run_files import RunDir

    out = RunDir(args.out)
    stop = StopRequest()
    try:
        with out.lock(), stop.watch():
            summary = _train_locked(args, cfg, run, out, base, data, run_targets, stop)
    except RunDirLocked as exc:
        raise UsageError(str(exc)) from None
    except Interrupted as exc:
        print(f"{run.run_id}: {exc}; checkpoint written, the next `fp8rl train` of it resumes there")
        return 128 + exc.signum
    print(
        f"{run.run_id}: {summary['status']} at step {summary['step']}/{summary['steps_planned']}"
        + (f" ({summary['reason']})" if summary["reason"] else "")
    )
    if cfg.tracking.tensorboard:
        print(f"curves: {curves_command(cfg, out.root)}")
    return 0 if summary["status"] in ("ok", "diverged") else 1


def curves_command(cfg, run_root: Path) -> str:
    """The TensorBoard command that shows the run written to `run_root` (`--out`): every run of the tier
    when it lies in the config's runs folder, else that run's own folder."""
    from fp8rl.run_files import runs_dir
    from fp8rl.tracking import tensorboard_command

    runs = Path(runs_dir(cfg.results_dir, cfg.tier))
    inside = Path(run_root).resolve().is_relative_to(runs.resolve())
    return tensorboard_command(runs if inside else Path(run_root))


def _train_locked(args: argparse.Namespace, cfg, run, out, base: Path, data: Path, run_targets, stop) -> dict:
    """The run, with its directory locked: check that a checkpoint there can be resumed, then train."""
    from fp8rl.engine.checkpoint import CheckpointError, has_checkpoint, verify_checkpoint
    from fp8rl.engine.trainer import Trainer
    from fp8rl.run_checks import resume_problem

    ckpt = out.checkpoint
    resumable = has_checkpoint(ckpt)  # also puts back what a kill inside a checkpoint save left
    refuse_foreign_run_dir(out, run.run_id)
    if resumable:
        try:
            meta = verify_checkpoint(ckpt)
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        if problem := resume_problem(out, meta):
            raise UsageError(problem)
    try:
        trainer = Trainer(
            cfg,
            run,
            base_dir=base,
            data_dir=data,
            out_dir=out.root,
            run_targets=run_targets,
            progress=not args.no_progress,
            device=args.device,
            stop=stop,
        )
    except ValueError as exc:  # e.g. CUDA asked for and none visible
        raise UsageError(str(exc)) from None
    claim_run_dir(out, run.run_id)  # refused or not, nothing was written before this
    return trainer.run()


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "sft", help="train a scratch model's base checkpoint (BF16 warm start)")
    add_config_args(p)
    p.add_argument("--model", required=True, help="a model name of the config")
    p.add_argument("--data", required=True, help="the directory `fp8rl data` wrote")
    p.add_argument("--out", required=True, help="output model directory, e.g. results/smoke/base/tiny")
    p.add_argument(
        "--seed",
        type=int,
        help="the base's seed: the RL seed whose base this is (configs with sft.per_seed: true), "
        "0 .. sft.bases-1 with sft.bases",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sft)

    p = add_command(
        sub,
        "model",
        help="write a pretrained model's base directory (hub id or weights package)",
    )
    add_config_args(p)
    p.add_argument("--model", required=True, help="a model name of the config (source hf or package)")
    p.add_argument(
        "--out", required=True, help="output model directory, e.g. results/small/base/smollm2-135m"
    )
    p.set_defaults(func=cmd_model)

    p = add_command(sub, "train", help="one GRPO/DAPO run of the matrix with the reference trainer")
    add_config_args(p)
    p.add_argument("--run", required=True, help="run id algo/model/variant/granularity/seedN")
    p.add_argument("--base", required=True, help="base model directory (fp8rl sft)")
    p.add_argument("--data", required=True, help="data directory (fp8rl data)")
    p.add_argument("--out", required=True, help="the run directory to write (resumed if it has a checkpoint)")
    p.add_argument("--reference", help="finished bf16 run directory (calib.reference: run)")
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="where to train (default: cuda when the config's resources.train.gpus > 0, else cpu)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)
