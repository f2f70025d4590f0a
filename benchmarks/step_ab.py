"""One training run's step timed with and without a change behind an environment switch, side by side.

Each arm is `fp8rl train` on the same config, run id, base and data for `--steps` steps (a fresh run
directory per repeat), the arms interleaved `--repeats` times; kept per arm are the medians of the run's
own `throughput.json`: seconds per step and the seconds of each phase (rollout, log-probs, update).
Both arms must give the same `metrics.jsonl` bit for bit except the timing keys (checked on every
repeat; exit 1 otherwise): the switch may only change speed. The default switch is the sampler's KV
cache (`FP8RL_SAMPLER_CACHE=grow`, transformers' concatenating cache, against the reserved one
written in place: fp8rl.engine.kv_reserve). With `--config-switch KEY` the arms differ by a config
override instead (`--set KEY=BEFORE` against `--set KEY=AFTER`), a change that may compute other bits
(`schedule.sampler_draw`: other tokens for a seed), so the metrics are compared and reported, not
required to be the same, and the rollout's tokens per second are kept beside the seconds (the arms'
responses, and so their lengths, differ).

    .venv/bin/python benchmarks/step_ab.py --config config/longform.yaml --run grpo/story/bf16/none/none/seed0 \\
        --base results/longform/base/story/seed0 --data results/longform/data --steps 3 --repeats 2 \\
        [--json results/published/benchmarks/step_ab_longform.json]
    .venv/bin/python benchmarks/step_ab.py --config config/longform.yaml --run grpo/story/bf16/none/none/seed0 \\
        --base results/longform/base/story/seed0 --data results/longform/data --steps 10 --repeats 2 \\
        --config-switch schedule.sampler_draw --before multinomial --after inverse_cdf \\
        [--json results/published/benchmarks/step_ab_sampler_draw_longform.json]
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

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = ("time/",)  # the only keys that hold wall-clock seconds


def _metrics_without_timing(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not k.startswith(TIMING_KEYS)} for row in rows]


def _run(args, env_extra: dict[str, str], out: Path, sets: list[str]) -> tuple[dict, list[dict]]:
    cmd = [sys.executable, "-m", "fp8rl.cli", "train", "--config", args.config, "--run", args.run, "--base",
           args.base, "--data", args.data, "--out", str(out), "--no-progress",
           "--set", f"schedule.steps={args.steps}", *sum((["--set", s] for s in args.set + sets), [])]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, **env_extra}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"step_ab: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    throughput = json.loads((out / "throughput.json").read_text(encoding="utf-8"))
    return throughput, _metrics_without_timing(out / "metrics.jsonl")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("config", "run", "base", "data"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--set", action="append", default=[], help="a config override for both arms")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--switch", default="FP8RL_SAMPLER_CACHE", help="the environment variable of the change")
    ap.add_argument("--before", default="grow", help="its value in the arm without the change")
    ap.add_argument("--after", default="reserved", help="its value in the arm with it")
    ap.add_argument(
        "--config-switch",
        metavar="KEY",
        help="a config key instead of --switch: the arms run "
        "with --set KEY=BEFORE and KEY=AFTER, and may compute other bits (module docstring)",
    )
    ap.add_argument("--json", type=Path, help="write the record here (atomically)")
    args = ap.parse_args(argv)
    from fp8rl.io import atomic_write_text  # after argparse: --help stays fast
    from fp8rl.provenance import provenance

    switch = args.config_switch or args.switch
    if args.config_switch:
        arms = {
            arm: ({}, [f"{switch}={value}"])
            for arm, value in (("before", args.before), ("after", args.after))
        }
    else:
        arms = {arm: ({switch: value}, []) for arm, value in (("before", args.before), ("after", args.after))}
    load_start = os.getloadavg()
    times: dict[str, list[dict]] = {arm: [] for arm in arms}
    same = True
    with tempfile.TemporaryDirectory(prefix="step_ab.") as tmp:
        for rep in range(args.repeats):
            metrics = {}
            for arm, (env, sets) in arms.items():
                throughput, metrics[arm] = _run(args, env, Path(tmp) / f"{arm}{rep}", sets)
                times[arm].append(throughput)
            same &= metrics["before"] == metrics["after"]
    summary = {}
    for arm, records in times.items():
        phases = {p: statistics.median(r["phases"][p]["seconds"] / r["steps"] for r in records)
                  for p in records[0]["phases"]}  # fmt: skip
        summary[arm] = {"step_s": statistics.median(r["step_time_s"] for r in records), "phase_s": phases,
                        "rollout_tokens_per_s": statistics.median(r["phases"]["rollout"]["tokens_per_s"]
                                                                  for r in records)}  # fmt: skip
    ratios = {"step": summary["before"]["step_s"] / summary["after"]["step_s"]}
    for phase, seconds in summary["after"]["phase_s"].items():
        ratios[phase] = summary["before"]["phase_s"][phase] / seconds
    print(f"{args.run} ({args.config}), {args.steps} steps, median of {args.repeats} interleaved repeats")
    print(f"{'':10}{'step s':>8}" + "".join(f"{p + ' s':>12}" for p in summary["after"]["phase_s"]))
    for arm, values in summary.items():
        label = f"{arm} ({switch}={args.before if arm == 'before' else args.after})"
        print(
            f"{label}\n{'':10}{values['step_s']:8.3f}"
            + "".join(f"{s:12.3f}" for s in values["phase_s"].values())
            + f"   rollout {values['rollout_tokens_per_s']:.0f} tokens/s"
        )
    ratios["rollout_tokens_per_s"] = (
        summary["after"]["rollout_tokens_per_s"] / summary["before"]["rollout_tokens_per_s"]
    )
    print("before/after: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"metrics bit for bit (timing keys aside): {'same' if same else 'DIFFERENT'}"
          + (" (a config switch may change them)" if args.config_switch else ""))  # fmt: skip
    if args.json:
        record = {"benchmark": "step_ab", "config": args.config, "run": args.run, "steps": args.steps,
                  "repeats": args.repeats, "switch": switch, "config_switch": bool(args.config_switch),
                  "before": args.before, "after": args.after,
                  "arms": summary, "ratios": ratios, "metrics_same": same, "load_average_start": load_start,
                  "load_average_end": os.getloadavg(), "provenance": provenance()}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0 if same or args.config_switch else 1


if __name__ == "__main__":
    raise SystemExit(main())
