"""Synthetic run directories in the exact on-disk format of docs/architecture.md#metrics and docs/interfaces.md.

`write_tier(tmp_path)` writes the smoke matrix (grpo, dapo × tiny × bf16, fp8, fp8_tis, fp8_calib ×
tensorwise × seeds 0, 1) under `tmp_path/results/smoke/runs/`, with these special cases:

- `DIVERGED`: status `diverged` at step 7, entropy spiking to 9.0 (plus a NaN entropy at its last step);
- `FAILED`: status `failed` after 3 steps, no throughput.json and no eval;
- `MISSING`: no run directory at all;
- `NO_KL`: never logs `mismatch/kl_k3` (a metric missing from a run);
- `MALFORMED`: its metrics.jsonl line 5 is a truncated JSON line.

Every FP8 run that did not fail writes a `ratio_hist.json` (128 shadow tokens, FP8 ratios wider).

Every number is a closed-form function of the run (`eval_score`, `reward`, ...), so tests can compute
what the tables must say.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from fp8rl.config import ExperimentConfig
from fp8rl.config_loader import load_config
from fp8rl.io import atomic_write_json, atomic_write_text
from fp8rl.matrix import RunSpec

REPO = Path(__file__).resolve().parents[3]
STEPS = 12
DIVERGED = "dapo/tiny/fp8/tensorwise/seed1"
FAILED = "dapo/tiny/fp8_tis/tensorwise/seed0"
MISSING = "grpo/tiny/fp8_calib/tensorwise/seed1"
NO_KL = "grpo/tiny/bf16/none/seed1"
MALFORMED = "grpo/tiny/fp8_tis/tensorwise/seed1"
MALFORMED_LINE = 5

VARIANT_BASE = {"bf16": 0.50, "fp8": 0.30, "fp8_tis": 0.40, "fp8_calib": 0.48}
FINAL = ("reward/mean", "entropy")
STEP_TIME = {"bf16": 2.0, "fp8": 1.6, "fp8_tis": 1.7, "fp8_calib": 1.8}


def eval_score(spec: RunSpec, task: str) -> float:
    bump = {"arith_gen": 0.0, "arith_mc": 0.1, "tool_call": -0.1}[task]
    return round(
        VARIANT_BASE[spec.variant] + bump + 0.03 * spec.seed + (0.02 if spec.algo == "dapo" else 0), 4
    )


def reward(spec: RunSpec, step: int) -> float:
    return VARIANT_BASE[spec.variant] + 0.01 * step + 0.005 * spec.seed


def entropy(spec: RunSpec, step: int) -> float:
    if spec.run_id == DIVERGED and step >= 5:
        return 9.0
    return 1.0 - 0.02 * step + 0.01 * spec.seed


def clip_low_neg(spec: RunSpec, step: int) -> float:
    return {"bf16": 0.01, "fp8": 0.05, "fp8_tis": 0.04, "fp8_calib": 0.012}[spec.variant] + 0.001 * spec.seed


def metrics_row(spec: RunSpec, step: int) -> dict:
    row = {
        "step": step,
        "reward/mean": reward(spec, step),
        "acc/mean": reward(spec, step),
        "entropy": entropy(spec, step),
        "resp_len/mean": 4.0,
        "gibberish/rate": 0.0,
        "clip/low_neg": clip_low_neg(spec, step),
        "clip/high_pos": 0.02,
        "clip/low_all": 0.03,
        "ratio/p01": 0.9 - (0.1 if spec.spec.fp8 else 0.0),
        "ratio/p50": 1.0,
        "ratio/p99": 1.1 + (0.1 if spec.spec.fp8 else 0.0),
        "time/rollout_s": 1.0,
        "time/train_s": 0.5,
        "tok/rollout": 768,
        "tok/train": 768,
    }
    if spec.run_id != NO_KL:
        row["mismatch/kl_k1"] = 0.001 * (5 if spec.spec.fp8 else 1)
        row["mismatch/kl_k3"] = 0.002 * (5 if spec.spec.fp8 else 1)
    if spec.spec.tis:
        row |= {"tis/mean": 0.98, "tis/clipped": 0.01}
    if spec.spec.calib:
        row |= {"calib/low": 0.7, "calib/high": 1.3, "calib/target_q": 0.01, "phantom/low_neg": 0.004}
        row["time/calib_s"] = 0.1
    return row


def steps_of(spec: RunSpec) -> int:
    return {DIVERGED: 7, FAILED: 3}.get(spec.run_id, STEPS)


def write_run(runs_dir: Path, spec: RunSpec, cfg: ExperimentConfig) -> None:
    run_dir = runs_dir / spec.run_id
    n = steps_of(spec)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json")))
    lines = [json.dumps(metrics_row(spec, s)) for s in range(1, n + 1)]
    if spec.run_id == DIVERGED:
        lines[-1] = lines[-1].replace('"entropy": 9.0', '"entropy": NaN')
    if spec.run_id == MALFORMED:
        lines[MALFORMED_LINE - 1] = lines[MALFORMED_LINE - 1][:40]
    atomic_write_text(run_dir / "metrics.jsonl", "\n".join(lines) + "\n")
    status = {DIVERGED: "diverged", FAILED: "failed"}.get(spec.run_id, "ok")
    reason = {"diverged": "entropy spike: 9.0 > 3 x baseline for 3 steps", "failed": "RuntimeError: boom"}
    atomic_write_json(
        run_dir / "summary.json",
        {
            "run_id": spec.run_id,
            "status": status,
            "reason": reason.get(status),
            "step": n,
            "steps_planned": STEPS,
            # the last row's values, as the trainers write them: a non-finite one is left out
            "final": {k: v for k, v in json.loads(lines[-1]).items() if k in FINAL and math.isfinite(v)},
            "provenance": {"git_commit": "abc123", "packages": {}, "machine": {}, "config_digest": "d"},
        },
    )
    if status == "failed":
        return
    phases = {
        "rollout": {"seconds": 1.0 * n, "tokens": 768 * n},
        "logprob": {"seconds": 0.2 * n, "tokens": 768 * n},
        "train": {"seconds": 0.5 * n, "tokens": 768 * n},
    }
    if spec.spec.calib:
        phases["calib"] = {"seconds": 0.1 * n, "tokens": 192 * n}
    for p in phases.values():
        p["tokens_per_s"] = p["tokens"] / p["seconds"]
    atomic_write_json(
        run_dir / "throughput.json",
        {
            "emulated": True,
            "device": "cpu",
            "fp8_backend": "emulated" if spec.spec.fp8 else "none",
            "steps": n,
            "step_time_s": STEP_TIME[spec.variant],
            "peak_mem_mb": 800.0,
            "phases": phases,
        },
    )
    if spec.spec.fp8:  # FP8 vs BF16-shadow ratios: the FP8 ones 3x wider in log space
        import torch

        from fp8rl.rl import RatioHistogram

        g = torch.Generator().manual_seed(spec.seed)
        shadow = torch.randn(16, 8, generator=g) * 0.05
        hist = RatioHistogram()
        hist.add(torch.exp(3 * shadow), torch.exp(shadow), torch.linspace(-1, 1, 16), torch.ones(16, 8))
        atomic_write_json(run_dir / "ratio_hist.json", hist.as_dict())
    ckpt = f"results/smoke/runs/{spec.run_id}/checkpoint"
    for suite, tasks in (("lm_eval", ["arith_gen", "arith_mc"]), ("agent", ["tool_call"])):
        results = [
            {
                "task": t,
                "metric": "exact_match" if suite == "lm_eval" else "accuracy",
                "value": eval_score(spec, t),
                "stderr": 0.03 if suite == "lm_eval" else None,  # null where a harness gives none
                "n": 100,
            }
            for t in tasks
        ]
        atomic_write_json(
            run_dir / "eval" / f"{suite}.json",
            {"checkpoint": ckpt, "suite": suite, "results": results, "provenance": {}},
        )


def write_tier(tmp_path: Path) -> ExperimentConfig:
    """Write the synthetic smoke tier under tmp_path/results; returns its config."""
    results = tmp_path / "results"
    pins = [
        f"results_dir={results}",
        "matrix.algorithms=[grpo, dapo]",
        "matrix.models=[tiny]",
        "matrix.variants=[bf16, fp8, fp8_tis, fp8_calib]",
        "matrix.granularities=[tensorwise]",
        "matrix.seeds=[0, 1]",
    ]
    cfg = load_config(REPO / "config" / "smoke.yaml", pins)
    runs_dir = results / cfg.tier / "runs"
    for spec in cfg.runs():
        if spec.run_id != MISSING:
            write_run(runs_dir, spec, cfg)
    return cfg


def seeds_used(cfg: ExperimentConfig, algo: str, variant: str) -> list[RunSpec]:
    """The runs of a variant that the comparison table averages (ok or diverged)."""
    return [
        s for s in cfg.runs() if s.algo == algo and s.variant == variant and s.run_id not in (FAILED, MISSING)
    ]


def finite(x: float) -> bool:
    return math.isfinite(x)
