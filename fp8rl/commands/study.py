"""`fp8rl study ratio-noise`: the paper's mechanism on synthetic ratios, in seconds (fp8rl/rl/ratio_noise.py).

Clip settings come from the experiment config (`--config`, `--algo`, `--set`), or from the defaults of
fp8rl.config when no config is given.
"""

from __future__ import annotations

import argparse
import json

from fp8rl.commands.common import UsageError, add_command, add_config_args
from fp8rl.vocabulary import CLIP_HIGH_POS, CLIP_LOW_NEG


def _levels(text: str) -> list[float]:
    try:
        levels = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--levels: expected comma-separated numbers, got {text!r}") from None
    if not levels or any(not lv >= 0 for lv in levels):
        raise UsageError(f"--levels: expected non-negative noise levels, got {text!r}")
    return levels


def _settings(args: argparse.Namespace):
    from fp8rl.config import AlgorithmsConfig, CalibConfig
    from fp8rl.config_loader import load_config

    if args.file:
        cfg = load_config(args.file, args.set)
        algo, calib = cfg.algorithm(args.algo), cfg.calib
    elif args.set:
        raise UsageError("--set needs --config FILE (without one the study uses fp8rl.config defaults)")
    else:
        algo, calib = getattr(AlgorithmsConfig(), args.algo), CalibConfig()
    return algo, calib


SETUP_ARGS = {"tokens": "n_tokens", "seq_len": "seq_len", "mean_nll": "mean_nll",
              "update_std": "update_std", "drift": "drift", "seed": "seed"}  # fmt: skip


# What the calibrated case does, in the study's JSON and under its table (the revised calibrator).
CALIBRATION_NOTES = [
    "population neg by default: the A<0 tokens set the target and the lower quantile "
    "(with 'all', A>0 tokens below L count toward the target without being clipped: A<0 tokens under-clip)",
    "target from the same tokens: the reference fraction is counted over every reference token of the "
    "population at once, as the trainer counts each update's own shadow tokens (no pooling over updates "
    "by default: a pooled target lags a clip fraction that changes; calib.momentum)",
    "upper bound from the clamped L: U = 1 + clip_high * (1 - L) / clip_low, and 1 + clip_high when the "
    "reference clips nothing (then L sits just under min(R): nothing is clipped below)",
]


def cmd_ratio_noise(args: argparse.Namespace) -> int:
    from fp8rl.rl.ratio_noise import DEFAULT_LEVELS, RatioNoiseSetup, ratio_noise_study

    levels = _levels(args.levels) if args.levels is not None else list(DEFAULT_LEVELS)
    given = {field: getattr(args, arg) for arg, field in SETUP_ARGS.items() if getattr(args, arg) is not None}
    setup = RatioNoiseSetup(**given)
    if setup.seq_len < 1 or setup.n_tokens < setup.seq_len:
        raise UsageError(f"need 1 <= --seq-len <= --tokens, got {setup.seq_len} and {setup.n_tokens}")
    if not (setup.update_std > 0 and setup.mean_nll > 0):
        raise UsageError(f"--update-std and --mean-nll must be > 0, got {setup.update_std}, {setup.mean_nll}")
    algo, calib = _settings(args)
    population = args.population or calib.population
    upper = args.upper or calib.upper
    rows = ratio_noise_study(
        levels, clip_low=algo.clip_low, clip_high=algo.clip_high, population=population, upper=upper,
        low_range=tuple(calib.low_range), setup=setup,
    )  # fmt: skip
    meta = {
        "algo": args.algo, "clip_low": algo.clip_low, "clip_high": algo.clip_high, "population": population,
        "upper": upper, "low_range": list(calib.low_range), "setup": setup.__dict__,
        "calibration": CALIBRATION_NOTES,
    }  # fmt: skip
    if args.out:
        from fp8rl.io import atomic_write_json

        atomic_write_json(args.out, {"study": "ratio-noise", **meta, "rows": rows})
    if args.json:
        print(json.dumps({"study": "ratio-noise", **meta, "rows": rows}, indent=2))
        return 0
    _print_table(rows, meta)
    return 0


def _print_table(rows: list[dict[str, float]], meta: dict) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    lo, hi = 1 - meta["clip_low"], 1 + meta["clip_high"]
    ref_tokens = int(rows[0]["calib/ref_tokens"]) if rows else 0
    table = Table(
        title=f"PPO clipping under FP8-like ratio noise ({meta['algo']}, fixed [{lo:g}, {hi:g}])",
        caption=(
            f"low = clip/low_neg, % of A<0 tokens below L (zero gradient); high = clip/high_pos, % of A>0 "
            f"tokens above U; phant = phantom/low_neg, % of A<0 tokens clipped under FP8 but not BF16; "
            f"miss = phantom/missed_neg, clipped under BF16 but not FP8 (phant - miss = net excess). "
            f"ref = BF16 ratios, fixed bounds; fixed = FP8 ratios, fixed bounds; calib = FP8 ratios, calibrated "
            f"bounds (population {meta['population']}, upper {meta['upper']}, low_range {meta['low_range']}, "
            f"target from {ref_tokens:,} reference tokens). Calibration: "
            + "; ".join(meta["calibration"])
            + f". noise = std of the per-logit error; "
            f"{meta['setup']['n_tokens']:,} synthetic tokens, seed {meta['setup']['seed']}."
        ),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("noise", justify="right")
    table.add_column("L", justify="right")
    table.add_column("U", justify="right")
    for metric in ("low", "high"):
        for case in ("ref", "fixed", "calib"):
            table.add_column(f"{metric}\n{case}", justify="right")
    for metric in ("phant", "miss"):
        for case in ("fixed", "calib"):
            table.add_column(f"{metric}\n{case}", justify="right")
    for r in rows:
        cells = [f"{r['noise']:g}", f"{r['calib/low']:.3f}", f"{r['calib/high']:.3f}"]
        for metric in (CLIP_LOW_NEG, CLIP_HIGH_POS):
            cells += [f"{100 * r[f'{case} {metric}']:.1f}" for case in ("ref", "fixed", "calib")]
        for metric in ("phantom/low_neg", "phantom/missed_neg"):
            cells += [f"{100 * r[f'{case} {metric}']:.1f}" for case in ("fixed", "calib")]
        table.add_row(*cells)
    console = Console()
    if not console.is_terminal:  # a pipe or file: no width to fit, don't squeeze to rich's default 80
        console = Console(width=110)
    console.print(table)


def register(sub: argparse._SubParsersAction) -> None:
    p_study = add_command(sub, "study", help="small self-contained experiments")
    study_sub = p_study.add_subparsers(dest="study_command", required=True, metavar="STUDY")
    p = add_command(
        study_sub,
        "ratio-noise",
        help="clip/low_neg under fixed vs calibrated bounds as FP8-like noise is added to PPO log-ratios",
    )
    add_config_args(p, required=False)  # without one: fp8rl.config's defaults
    p.add_argument("--algo", choices=["grpo", "dapo"], default="grpo", help="whose clip_low/clip_high to use")
    p.add_argument("--levels", help="comma-separated logit-noise stds (default 0,0.05,0.1,0.2,0.3,0.5)")
    p.add_argument("--population", choices=["all", "neg"], help="override calib.population (default neg)")
    p.add_argument("--upper", choices=["proportional", "quantile"], help="override calib.upper")
    # defaults: fp8rl.rl.ratio_noise.RatioNoiseSetup
    p.add_argument("--tokens", type=int, help="synthetic tokens (262144)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence, one advantage each (256)")
    p.add_argument("--update-std", type=float, help="std of the clean log-ratio (0.1)")
    p.add_argument("--drift", type=float, help="mean clean log-ratio times sign(A) (0.05)")
    p.add_argument("--mean-nll", type=float, help="mean -log p of the sampled tokens (0.7)")
    p.add_argument("--seed", type=int, help="random seed (0)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--out", help="also write the rows as JSON to this file")
    p.set_defaults(func=cmd_ratio_noise)
