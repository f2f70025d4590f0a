"""`fp8rl config validate|show|schema` and `fp8rl matrix`: read an experiment config."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.config_loader import load_config
from fp8rl.validation import CONFIG_CHECKS

MATRIX_AXES = ("algo", "model", "variant", "granularity", "seed", "condition")  # `fp8rl matrix` filters

# ------------------------------------------------------------------------------------------ config


def cmd_config_validate(args: argparse.Namespace) -> int:
    cfg = load_config(args.file, args.set, checks=CONFIG_CHECKS)
    n = len(cfg.runs())
    print(f"{args.file}: ok (tier {cfg.tier}, {n} runs, digest {cfg.digest()})")
    return 0


def cmd_config_schema(args: argparse.Namespace) -> int:
    from fp8rl.config import ExperimentConfig

    print(json.dumps(ExperimentConfig.model_json_schema(), indent=2))
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    import yaml

    cfg = load_config(args.file, args.set)
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    return 0


# ------------------------------------------------------------------------------------------ matrix


def _check_filters(args: argparse.Namespace, runs: list) -> None:
    """UsageError for a filter value that no run of the matrix has (a typo would list 0 runs)."""
    for axis in MATRIX_AXES:
        present = list(dict.fromkeys(str(getattr(r, axis)) for r in runs))
        article = "an" if axis.startswith("a") else "a"
        for value in getattr(args, axis) or []:
            if value not in present:
                raise UsageError(
                    f"--{axis} {value}: {value!r} is not {article} {axis} of the matrix in {args.file}; "
                    f"allowed: {', '.join(present)}"
                )


def cmd_matrix(args: argparse.Namespace) -> int:
    from fp8rl.config.runs import expand_matrix

    cfg = load_config(args.file, args.set)
    _check_filters(args, expand_matrix(cfg))
    runs = expand_matrix(
        cfg,
        **{axis: getattr(args, axis) for axis in MATRIX_AXES},
    )
    if args.json:
        out = {
            "tier": cfg.tier,
            "count": len(runs),
            "runs": [
                {
                    "run_id": r.run_id,
                    "algo": r.algo,
                    "model": r.model,
                    "variant": r.variant,
                    "granularity": r.granularity,
                    "seed": r.seed,
                }
                | ({} if r.condition is None else {"condition": r.condition})
                for r in runs
            ],
        }
        print(json.dumps(out, indent=2))
        return 0
    if args.ids_only:
        for r in runs:
            print(r.run_id)
        return 0
    for r in runs:
        print(r.run_id)
    print(f"\n{len(runs)} runs (tier {cfg.tier})")
    for axis in ("algo", "model", "variant", "granularity", "condition"):
        if axis == "condition" and all(r.condition is None for r in runs):
            continue
        counts = Counter(getattr(r, axis) for r in runs)
        print(f"  {axis:<12} " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p_config = add_command(sub, "config", help="validate, show or export the config schema")
    config_sub = p_config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    p = add_command(config_sub, "validate", help="validate a config file; exit 2 with the problems")
    add_config_args(p, legacy_positional=True)
    p.set_defaults(func=cmd_config_validate)
    p = add_command(config_sub, "show", help="print the resolved config with every default filled in")
    add_config_args(p, legacy_positional=True)
    p.set_defaults(func=cmd_config_show)
    p = add_command(config_sub, "schema", help="print the JSON schema of the config")
    p.set_defaults(func=cmd_config_schema)

    p = add_command(sub, "matrix", help="list the run ids of a config's matrix")
    add_config_args(p, legacy_positional=True)
    for axis in MATRIX_AXES:
        p.add_argument(f"--{axis}", action="append", help=f"keep only runs with this {axis} (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--ids-only", action="store_true", help="one run id per line, nothing else")
    p.set_defaults(func=cmd_matrix)
