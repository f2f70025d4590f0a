"""`fp8rl verl train|overrides|import-metrics`: the paper tier's training through verl.

`fp8rl verl train` takes the arguments of `fp8rl train` (docs/interfaces.md) and writes the same run
directory: it checks that verl can run the cell, converts the data splits to verl's parquet, writes the
loss spec (`verl_loss.json`), the overrides (`verl_overrides.json`) and the job script (`verl_launch.sh`),
runs the script (Ray across the Slurm allocation, verl, the HF checkpoint), then imports verl's log into
`metrics.jsonl` and writes `summary.json` and `throughput.json`. `--dry-run` stops before running it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from fp8rl.commands.common import UsageError, add_config_args


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if key in r]
    return sum(vals) / len(vals) if vals else None


def reference_targets(cfg, reference: Path | None) -> tuple[float | None, float | None]:
    """The bf16 run's mean clip fractions: the calibration targets of `calib.reference: run` on verl."""
    from fp8rl.io import read_jsonl

    if reference is None:
        raise UsageError(
            "calib.reference is 'run': pass --reference RUN_DIR (the matching finished bf16 run)"
        )
    path = reference / "metrics.jsonl"
    if not path.is_file():
        raise UsageError(f"--reference {reference}: no metrics.jsonl (is the bf16 run finished?)")
    rows = read_jsonl(path)
    low_key, high_key = (
        ("clip/low_all", "clip/high_all")
        if cfg.calib.population == "all"
        else ("clip/low_neg", "clip/high_pos")
    )
    q = _mean(rows, low_key)
    if q is None:
        raise UsageError(f"{path}: no {low_key!r} values to calibrate against")
    q_high = _mean(rows, high_key) if cfg.calib.upper == "quantile" else None
    if cfg.calib.upper == "quantile" and q_high is None:
        raise UsageError(f"{path}: no {high_key!r} values for calib.upper: quantile")
    return q, q_high


def _setup(args: argparse.Namespace):
    from fp8rl.adapters.verl_overrides import AdapterError, check_verl_support
    from fp8rl.config import find_run
    from fp8rl.config_loader import load_config

    cfg = load_config(args.file, args.set)
    try:
        spec = find_run(cfg, args.run)
        check_verl_support(cfg, spec)
    except (ValueError, AdapterError) as exc:
        raise UsageError(str(exc)) from None
    return cfg, spec


def _paths(cfg, spec, args: argparse.Namespace):
    from fp8rl.adapters.verl_overrides import VerlPaths

    out = Path(args.out).resolve()
    model = cfg.model(spec.model)
    base = Path(args.base).resolve() if args.base else None
    model_path = str(base) if base and (base / "config.json").is_file() else (model.hf_id or str(base))
    return VerlPaths(
        model_path, str(out / "verl_data/train.parquet"), str(out / "verl_data/test.parquet"), str(out)
    )


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


def _throughput(rows: list[dict], fp8: bool) -> dict:
    phases = {}
    for phase, key in (
        ("rollout", "time/rollout_s"),
        ("logprob", "time/logprob_s"),
        ("train", "time/train_s"),
    ):
        secs = [float(r[key]) for r in rows if key in r]
        if secs:
            phases[phase] = {"seconds": sum(secs)}
    steps = len(rows)
    total = sum(p["seconds"] for p in phases.values())
    return {
        "emulated": False,
        "device": "cuda",
        "fp8_backend": "transformer_engine" if fp8 else "none",
        "steps": steps,
        "step_time_s": total / steps if steps else None,
        "phases": phases,
    }


def cmd_train(args: argparse.Namespace) -> int:
    from fp8rl.adapters.verl_data import write_parquet
    from fp8rl.adapters.verl_launch import render_script
    from fp8rl.adapters.verl_metrics import import_log, run_status
    from fp8rl.adapters.verl_overrides import deviations, loss_spec, verl_overrides
    from fp8rl.containers import image_location
    from fp8rl.io import atomic_write_json, atomic_write_text
    from fp8rl.provenance import provenance

    cfg, spec = _setup(args)
    data = Path(args.data)
    for split in ("train", "test"):
        if not (data / f"{split}.jsonl").is_file():
            raise UsageError(f"--data {data}: no {split}.jsonl (run `fp8rl data` first)")
    targets = (None, None)
    if spec.spec.calib and cfg.calib.reference == "run":
        targets = reference_targets(cfg, Path(args.reference) if args.reference else None)
    paths = _paths(cfg, spec, args)
    out = Path(paths.out)
    model = cfg.model(spec.model)
    overrides = verl_overrides(cfg, spec, paths) + list(args.override)
    image = image_location(cfg.containers, cfg.results_dir, "train")
    if image and image.endswith(".sif"):
        image = str(Path(image).resolve())

    for split in ("train", "test"):
        write_parquet(
            data / f"{split}.jsonl", out / f"verl_data/{split}.parquet", task=cfg.task.name, split=split
        )
    atomic_write_json(
        out / "verl_loss.json", loss_spec(cfg, spec, target_q=targets[0], target_q_high=targets[1])
    )
    atomic_write_json(
        out / "verl_overrides.json",
        {"run_id": spec.run_id, "overrides": overrides, "deviations": deviations(cfg, spec), "image": image},
    )
    script = out / "verl_launch.sh"
    atomic_write_text(
        script,
        render_script(
            run_id=spec.run_id, overrides=overrides, out=str(out), nodes=model.nodes,
            gpus_per_node=model.gpus_per_node, image=image,
        ),
    )  # fmt: skip
    if args.dry_run:
        print(script.read_text())
        return 0

    rc = subprocess.run(["bash", str(script)], check=False).returncode
    log = out / "verl_log.jsonl"
    rows = import_log(log, out / "metrics.jsonl") if log.is_file() else []
    status, reason, step = run_status(
        rows, steps_planned=cfg.schedule.steps, exit_code=rc, stability=cfg.stability
    )
    container = None
    record = Path(cfg.results_dir) / "containers" / "train.json"
    if image and record.is_file():
        container = json.loads(record.read_text()).get("id")
    atomic_write_json(out / "throughput.json", _throughput(rows, spec.spec.fp8))
    atomic_write_json(
        out / "summary.json",
        {
            "run_id": spec.run_id,
            "status": status,
            "reason": reason,
            "step": step,
            "steps_planned": cfg.schedule.steps,
            "final": {k: v for k, v in (rows[-1] if rows else {}).items() if k != "step"},
            "backend": "verl",
            "deviations": deviations(cfg, spec),
            "provenance": provenance(cfg.digest(), container),
        },
    )
    print(f"{spec.run_id}: {status}" + (f" ({reason})" if reason else ""), file=sys.stderr)
    return 1 if status == "failed" else 0


def _run_args(p: argparse.ArgumentParser) -> None:
    add_config_args(p, positional=False)
    p.add_argument("--run", required=True, help="run id, algo/model/variant/granularity/seedN")


def register(sub: argparse._SubParsersAction) -> None:
    p_v = sub.add_parser("verl", help="train a paper-tier run through verl (Ray, Megatron, vLLM)")
    v_sub = p_v.add_subparsers(dest="verl_command", required=True, metavar="ACTION")

    p = v_sub.add_parser("train", help="train one run through verl; same arguments as `fp8rl train`")
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
    p.set_defaults(func=cmd_train)

    p = v_sub.add_parser("overrides", help="print verl's Hydra overrides for one run")
    _run_args(p)
    p.add_argument("--base", help="base model directory (default: the model's hf_id)")
    p.add_argument("--out", default="RUN_DIR", help="the run directory the paths point into")
    p.add_argument("--json", action="store_true", help="overrides, loss spec and deviations as JSON")
    p.set_defaults(func=cmd_overrides)

    p = v_sub.add_parser("import-metrics", help="verl's file-logger JSONL -> fp8rl metrics.jsonl")
    p.add_argument("log", help="verl's log (VERL_FILE_LOGGER_PATH)")
    p.add_argument("--out", required=True, help="metrics.jsonl to write")
    p.set_defaults(func=cmd_import_metrics)
