"""What the paper's recalibration cadence saves: a calibrated run's step with its bounds recomputed at
every update against every N steps (`calib.every: N`), side by side.

Two runs of one config, the same base and data: `--per-update` (a run id whose condition calibrates at
every update) and `--cadence` (its twin whose condition sets `calib.every`), each `fp8rl train` for
`--steps` steps in a fresh run directory, the two interleaved `--repeats` times. Kept per arm are the
medians of the run's own `throughput.json`: seconds per step and per phase (rollout, log-probs, update,
`calib`: the BF16 shadow's passes). Over `--steps` equal to the cadence, the cadence arm recalibrates
once (step 1) and holds the bounds over the other steps: its steady-state share. The two arms' metrics
differ (the bounds do), so nothing is compared bit for bit; both must run to their last step.

The runs' conditions may set their noise by a target KL, which each run would search for before step 1
(minutes on the longform testbed); the timing needs the step, not the search, so the script writes a
copy of the config whose every condition carries `fp8.noise_scale: --noise-scale` instead of a target.

    .venv/bin/python benchmarks/calib_cadence.py --config config/corrections.yaml \\
        --per-update grpo/story/fp8_tis_calib/tensorwise/kl1e-2/seed0 \\
        --cadence grpo/story/fp8_tis_calib/tensorwise/kl1e-2_every20/seed0 \\
        --base results/longform/base/story/seed0 --data results/longform/data --steps 20 --repeats 2 \\
        [--json results/published/benchmarks/calib_cadence_longform.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def fixed_noise_config(config: Path, scale: float, dest: Path) -> Path:
    """`config` with every matrix condition's noise fixed at `scale` (no target-KL search), as `dest`;
    without a `failure_search` section, whose conditions need the target KLs the copy drops."""
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data.pop("failure_search", None)
    for cond in data.get("matrix", {}).get("conditions", []):
        fp8 = {k: v for k, v in (cond.get("fp8") or {}).items() if k != "target_kl"}
        cond["fp8"] = fp8 | {"noise_scale": scale}
    dest.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return dest


def train(config: Path, run: str, args, out: Path) -> dict:
    """`fp8rl train` of `run` for `args.steps` steps into `out`; its throughput.json."""
    cmd = [sys.executable, "-m", "fp8rl.cli", "train", "--config", str(config), "--run", run,
           "--base", args.base, "--data", args.data, "--out", str(out), "--no-progress",
           "--set", f"schedule.steps={args.steps}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"calib_cadence: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    if summary.get("step") != args.steps:
        raise SystemExit(
            f"calib_cadence: {run} stopped at step {summary.get('step')} ({summary.get('status')})"
        )
    return json.loads((out / "throughput.json").read_text(encoding="utf-8"))


def per_step(records: list[dict]) -> dict:
    """The medians over repeats of seconds per step and of each phase's seconds per step."""
    phases = {p: statistics.median(r["phases"][p]["seconds"] / r["steps"] for r in records)
              for p in records[0]["phases"]}  # fmt: skip
    return {"step_s": statistics.median(r["step_time_s"] for r in records), "phase_s": phases}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("config", "per-update", "cadence", "base", "data"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--steps", type=int, default=20, help="steps per run (the cadence: one recalibration)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--noise-scale", type=float, default=8.0, help="the conditions' fixed noise scale")
    ap.add_argument("--json", type=Path, help="write the record here (atomically)")
    args = ap.parse_args(argv)
    from fp8rl.io import atomic_write_json  # after argparse: --help stays fast
    from fp8rl.provenance import provenance

    arms = {"per_update": args.per_update, "cadence": args.cadence}
    load_start, measured = os.getloadavg(), provenance()  # the checkout the runs start from
    records: dict[str, list[dict]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="calib_cadence.") as tmp:
        config = fixed_noise_config(Path(args.config), args.noise_scale, Path(tmp) / "config.yaml")
        for rep in range(args.repeats):
            for arm, run in arms.items():
                records[arm].append(train(config, run, args, Path(tmp) / f"{arm}{rep}"))
    summary = {arm: per_step(recs) for arm, recs in records.items()}
    per_update, cadence = summary["per_update"], summary["cadence"]
    ratios = {"step": per_update["step_s"] / cadence["step_s"],
              "calib": per_update["phase_s"]["calib"] / cadence["phase_s"]["calib"]}  # fmt: skip
    calib_share = per_update["phase_s"]["calib"] / per_update["step_s"]
    print(f"{args.config}: {args.steps} steps per run, median of {args.repeats} interleaved repeats")
    print(f"{'':12}{'step s':>8}" + "".join(f"{p + ' s':>12}" for p in per_update["phase_s"]))
    for arm, values in summary.items():
        print(f"{arm:12}{values['step_s']:8.3f}" + "".join(f"{s:12.3f}" for s in values["phase_s"].values()))
    print(f"per update / cadence: step {ratios['step']:.2f}x, calib {ratios['calib']:.2f}x; "
          f"the shadow's passes are {100 * calib_share:.1f} % of the per-update step")  # fmt: skip
    if args.json:
        record = {"benchmark": "calib_cadence", "config": args.config, "runs": arms, "steps": args.steps,
                  "repeats": args.repeats, "noise_scale": args.noise_scale, "arms": summary, "ratios": ratios,
                  "calib_share": calib_share, "load_average_start": load_start,
                  "load_average_end": os.getloadavg(), "provenance": measured}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.json, record, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
