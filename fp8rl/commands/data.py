"""`fp8rl data`, `fp8rl fetch data|model`: a tier's task splits and the hub downloads they come from.

    fp8rl fetch data  --config FILE --out DIR/hub.json              # login node: datasets -> hub.home
    fp8rl fetch model --config FILE --model NAME --out base/NAME/model.json   # login node: one hf model
    fp8rl data        --config FILE --out DIR [--hub DIR/hub.json]  # any node, offline

`fetch` is the only step that talks to the hub: it fills the shared cache `hub.home` (HF_HOME) and
writes a record of what it fetched (repository, commit, file hashes; fp8rl.adapters.hub). `data`
writes the splits: the reference trainer's tasks (synthetic arithmetic and word problems generated
from `task.seed`, or gsm8k; fp8rl.engine.data), or a hub dataset converted from its cached snapshot for
verl (fp8rl.adapters.math_data), holding `OUT/.data.lock` meanwhile (a second `fp8rl data` on the
same --out exits 2). A task the config's backend cannot build exits 2 naming the key, before anything
is fetched or written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8rl.commands.common import UsageError, add_command, add_config_args, model_arg
from fp8rl.config_loader import load_config

# One `fp8rl data` per --out at a time (fp8rl.locks.hold_lock): two would mix their files.
DATA_LOCK = ".data.lock"


def _load(args: argparse.Namespace):
    from fp8rl.adapters.math_data import task_problems
    from fp8rl.engine.tasks import config_problems

    return load_config(args.file, args.set, checks=[config_problems, task_problems])


def cmd_data(args: argparse.Namespace) -> int:
    from fp8rl.locks import RunDirLocked, hold_lock

    cfg = _load(args)
    try:
        with hold_lock(Path(args.out) / DATA_LOCK, "wait for that `fp8rl data` to end"):
            return _write_data(args, cfg)
    except RunDirLocked as exc:
        raise UsageError(f"--out {args.out}: {exc}") from None


def _write_data(args: argparse.Namespace, cfg) -> int:
    from fp8rl.engine.data import DATA_TASKS

    if cfg.task.name in DATA_TASKS:
        from fp8rl.engine import tasks, word_problems
        from fp8rl.engine.data import write_data

        try:
            if cfg.task.name == "arithmetic":
                tasks.check_levels(cfg.task.levels)
            elif cfg.task.name == "word_problems":
                word_problems.check_levels(cfg.task.levels)
        except ValueError as exc:
            raise UsageError(f"{args.file}: {exc}") from None
        info = write_data(cfg, args.out)
    else:
        from fp8rl.adapters.math_data import write_data

        hub = Path(args.hub) if args.hub else Path(args.out) / "hub.json"
        try:
            info = write_data(cfg, args.out, hub)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    counts = ", ".join(f"{k} {v}" for k, v in info["counts"].items())
    print(f"wrote {args.out}: {counts}")
    return 0


def cmd_fetch_data(args: argparse.Namespace) -> int:
    from fp8rl.adapters.hub import EVAL_DATASETS, TRAIN_DATASETS, fetch_snapshot
    from fp8rl.io import atomic_write_json

    cfg = _load(args)
    repos = [TRAIN_DATASETS[cfg.task.name]] if cfg.task.name in TRAIN_DATASETS else []
    repos += [EVAL_DATASETS[t] for t in cfg.eval.lm_eval_tasks if t in EVAL_DATASETS]
    record = {"hf_home": str(Path(cfg.hub.home).resolve()), "datasets": {}}
    for repo in repos:
        try:
            snap = fetch_snapshot(repo, repo_type="dataset", revision=None, hf_home=cfg.hub.home)
        except (OSError, ValueError) as exc:
            raise UsageError(f"fetch {repo}: {exc}") from None
        record["datasets"][repo] = snap
        print(f"{repo}@{snap['revision']}: {len(snap['files'])} files, {snap['bytes']} bytes")
    atomic_write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0


def cmd_fetch_model(args: argparse.Namespace) -> int:
    from fp8rl.adapters.hub import fetch_snapshot
    from fp8rl.io import atomic_write_json

    cfg = _load(args)
    model = model_arg(cfg, args)
    if model.source != "hf":
        raise UsageError(f"--model {args.model}: source {model.source!r}; `fetch model` takes hf models")
    try:
        snap = fetch_snapshot(model.hf_id, repo_type="model", revision=model.revision, hf_home=cfg.hub.home)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {args.model}: fetch {model.hf_id}: {exc}") from None
    if not (Path(snap["path"]) / "config.json").is_file():
        raise UsageError(f"{model.hf_id}@{snap['revision']}: no config.json: not a Hugging Face model")
    atomic_write_json(args.out, {"model": model.name, **snap})
    print(
        f"{model.hf_id}@{snap['revision']}: {len(snap['files'])} files, {snap['bytes']} bytes -> {args.out}"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "data", help="write the task splits (train/test/tool) of a tier")
    add_config_args(p)
    p.add_argument("--out", required=True, help="output directory, e.g. results/smoke/data")
    p.add_argument("--hub", help="the record `fetch data` wrote (hub datasets; default OUT/hub.json)")
    p.set_defaults(func=cmd_data)

    p_f = add_command(sub, "fetch", help="download hub datasets or a model into hub.home (login node)")
    f_sub = p_f.add_subparsers(dest="fetch_command", required=True, metavar="WHAT")
    p = add_command(f_sub, "data", help="the training set and lm-eval's eval sets -> a record")
    add_config_args(p)
    p.add_argument("--out", required=True, help="record to write, e.g. results/paper/data/hub.json")
    p.set_defaults(func=cmd_fetch_data)
    p = add_command(f_sub, "model", help="one hf model at its pinned revision -> a record")
    add_config_args(p)
    p.add_argument("--model", required=True, help="a model name of the config")
    p.add_argument("--out", required=True, help="record to write, e.g. results/paper/base/NAME/model.json")
    p.set_defaults(func=cmd_fetch_model)
