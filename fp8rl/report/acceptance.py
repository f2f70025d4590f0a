"""A testbed's acceptance (the config's `acceptance` section, fp8rl.config.acceptance) read off its
finished bf16 runs.

For every run of the acceptance arm: step 1's `entropy` and `resp_len/mean` (metrics.jsonl), whether a
detector flagged it (summary.json's `divergence`), and the rise of the held-out endpoint from its base
(`base/.../eval/heldout.json`) to its final checkpoint (`eval/heldout.json`), both scored with the bf16
sampler (fp8rl.engine.heldout). Runs of one base are averaged first (the base is the unit); the rise's
two-sided t-interval is taken over the bases. `check_acceptance` returns every figure and the list of
criteria missed (empty: accepted); a run that has not finished, or has no held-out score yet, is counted
as missing, never as passing.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fp8rl.config import ExperimentConfig
from fp8rl.config.study import arm_cell
from fp8rl.report.stats import t_interval
from fp8rl.run_files import RunDir, runs_dir


def _heldout(path: Path, metric: str) -> float | None:
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    for r in doc.get("results", []):
        if r.get("metric") == metric:
            return float(r["value"])
    return None


def _first_step(run: RunDir) -> dict:
    if not run.metrics.exists():
        return {}
    with open(run.metrics) as fh:
        line = fh.readline()
    return json.loads(line) if line.strip() else {}


def check_acceptance(cfg: ExperimentConfig) -> dict:
    """Every figure of the acceptance and `missed`: the criteria not met (module docstring). ValueError
    when the config has no `acceptance` section or its arm names no run of the matrix."""
    a = cfg.acceptance
    if a is None:
        raise ValueError("acceptance: not set in this config")
    specs = [s for s in cfg.runs() if arm_cell(a.arm, s.run_id)]
    if not specs:
        raise ValueError(f"acceptance.arm: {a.arm!r} is no cell of the matrix (see `fp8rl matrix`)")
    tier = Path(cfg.results_dir) / cfg.tier
    metric = a.endpoint.removeprefix("heldout/")
    runs, rises_by_base = [], {}
    for spec in specs:
        run = RunDir.of(runs_dir(cfg.results_dir, cfg.tier), spec.run_id)
        base = cfg.base_of(spec.model, spec.seed)
        first = _first_step(run)
        summary = json.loads(run.summary.read_text()) if run.summary.is_file() else None
        start = _heldout(tier / "base" / base / "eval" / "heldout.json", metric)
        end = _heldout(run.eval_file("heldout"), metric)
        rise = None if start is None or end is None else end - start
        runs.append(
            {"run_id": spec.run_id, "base": base, "finished": summary is not None,
             "divergence": (summary or {}).get("divergence"), "entropy_step1": first.get("entropy"),
             "resp_len_step1": first.get("resp_len/mean"), "base_endpoint": start, "final_endpoint": end,
             "rise": rise}
        )  # fmt: skip
        if rise is not None:
            rises_by_base.setdefault(base, []).append(rise)
    per_base = [statistics.fmean(v) for v in rises_by_base.values()]
    rise = t_interval(per_base, a.confidence)
    mean, low, high = rise.estimate, rise.low, rise.high
    missed = []
    if len(per_base) < a.min_bases:
        missed.append(f"bases with a held-out rise: {len(per_base)} < acceptance.min_bases {a.min_bases}")
    if not mean >= a.min_rise:
        missed.append(f"mean rise {mean:.3f} < acceptance.min_rise {a.min_rise}")
    if not low > 0:
        missed.append(f"the {a.confidence:.0%} interval of the rise starts at {low:.3f}, not above 0")
    for r in runs:
        if not r["finished"]:
            missed.append(f"{r['run_id']}: not finished")
        if r["entropy_step1"] is None or r["entropy_step1"] < a.min_start_entropy:
            missed.append(f"{r['run_id']}: entropy at step 1 {r['entropy_step1']} < {a.min_start_entropy}")
        if r["resp_len_step1"] is None or r["resp_len_step1"] < a.min_response_tokens:
            missed.append(
                f"{r['run_id']}: response length at step 1 {r['resp_len_step1']} < {a.min_response_tokens}"
            )
        if a.no_divergence and r["divergence"]:
            missed.append(
                f"{r['run_id']}: flagged ({r['divergence'].get('kind')} at step {r['divergence'].get('step')})"
            )
    return {"endpoint": a.endpoint, "runs": runs, "bases": len(per_base), "mean_rise": mean,
            "interval": [low, high], "confidence": a.confidence, "missed": missed}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """`python -m fp8rl.report.acceptance --config FILE`: print the acceptance figures as JSON; exit 1 when a
    criterion is missed, 2 on a config without an acceptance section."""
    import argparse
    import sys

    from fp8rl.config_loader import load_config

    parser = argparse.ArgumentParser(
        prog="python -m fp8rl.report.acceptance", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    try:
        result = check_acceptance(load_config(args.config))
    except ValueError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 1 if result["missed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
