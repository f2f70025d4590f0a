"""Synthetic run directories in the exact on-disk format of docs/architecture.md#metrics and docs/interfaces.md.

`write_tier(tmp_path)` writes the smoke matrix (grpo, dapo × tiny × bf16, fp8, fp8_tis, fp8_calib ×
tensorwise × seeds 0, 1) under `tmp_path/results/smoke/runs/`, with these special cases:

- `DIVERGED`: status `diverged` at step 7, entropy spiking to 9.0 (plus a NaN entropy at its last step);
- `FAILED`: status `failed` after 3 steps, no throughput.json and no eval;
- `MISSING`: no run directory at all;
- `NO_KL`: never logs `mismatch/kl_k3` (a metric missing from a run);
- `MALFORMED`: its metrics.jsonl line 5 is a truncated JSON line.

Every FP8 run that did not fail writes a `ratio_hist.json` (128 shadow tokens, FP8 ratios wider).

Each metrics line has exactly the keys a real run of its algorithm and variant logs (`metric_keys.json`,
recorded from real tiny trainer runs; tests/integration/test_report_fixture_keys.py keeps it current):
`phantom/*` and the `calib` phase in every FP8 variant (the BF16 shadow pass runs in all of them),
`calib/*` only in calibrated ones, `tis/*` only with TIS, `clip/dual` and `dapo/*` only in DAPO.

`write_mechanism_tier(tmp_path)` writes a matrix with FP8 conditions (`MECHANISM_CONDITIONS`: format ×
noise dose, and one without the FP8 KV cache) whose phantom clipping and mismatch KL grow with the dose
(`phantom_low_neg`, `mismatch_kl`).

Every number is a closed-form function of the run (`eval_score`, `reward`, ...), so tests can compute
what the tables must say.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import yaml

from fp8rl.config import ExperimentConfig
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.io import atomic_write_json, atomic_write_text

REPO = Path(__file__).resolve().parents[3]


def fold(name: str) -> str:
    """A repository page's prose with its line breaks and blockquote marks folded away, so that a claims
    test finds a sentence wherever the text wraps."""
    text = (REPO / name).read_text(encoding="utf-8")
    return " ".join(re.sub(r"^> ?", "", text, flags=re.M).split())


def published_csv(tier: str, name: str) -> pd.DataFrame:
    """One table of a published tier (`results/published/{tier}/tables/{name}.csv`), blanks as NaN."""
    path = REPO / "results" / "published" / tier / "tables" / f"{name}.csv"
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


STEPS = 12
DIVERGED = "dapo/tiny/fp8/tensorwise/seed1"
FAILED = "dapo/tiny/fp8_tis/tensorwise/seed0"
MISSING = "grpo/tiny/fp8_calib/tensorwise/seed1"
NO_KL = "grpo/tiny/bf16/none/seed1"
MALFORMED = "grpo/tiny/fp8_tis/tensorwise/seed1"
MALFORMED_LINE = 5

METRIC_KEYS = json.loads((Path(__file__).parent / "metric_keys.json").read_text())
VARIANT_BASE = {"bf16": 0.50, "fp8": 0.30, "fp8_tis": 0.40, "fp8_calib": 0.48, "fp8_tis_calib": 0.49}
FINAL = ("reward/mean", "entropy")
STEP_TIME = {"bf16": 2.0, "fp8": 1.6, "fp8_tis": 1.7, "fp8_calib": 1.8, "fp8_tis_calib": 1.9}


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
    base = {"bf16": 0.01, "fp8": 0.05, "fp8_tis": 0.04, "fp8_calib": 0.012, "fp8_tis_calib": 0.011}[
        spec.variant
    ]
    return base + 0.001 * spec.seed + 0.0005 * (step % 2)


GRAN_FACTOR = {"tensorwise": 1.0, "delayed": 1.2, "rowwise": 0.6, "blockwise": 0.5, "mxfp8": 0.4}


def phantom_low_neg(spec: RunSpec, step: int, dose: float = 1.0) -> float:
    """FP8-only clipping of the shadow tokens: grows with the dose, calibration takes most of it away."""
    base = 0.003 if spec.spec.calib else 0.006
    return base * dose * GRAN_FACTOR.get(spec.granularity, 0.0) + 0.0004 * spec.seed + 0.0002 * (step % 3)


def phantom_missed_neg(spec: RunSpec, step: int) -> float:
    return (0.0025 if spec.spec.calib else 0.001) + 0.0001 * (step % 2)


def mismatch_kl(spec: RunSpec, dose: float = 1.0) -> float:
    return 0.002 * (5 * dose**2 if spec.spec.fp8 else 1) + 0.0001 * spec.seed


def metrics_row(spec: RunSpec, step: int, dose: float = 1.0) -> dict:
    """One metrics.jsonl line: the keys of `METRIC_KEYS` for the run's algo and variant; `dose` is the
    run's `fp8.noise_scale`."""
    keys = set(METRIC_KEYS["metrics"][spec.algo][spec.variant])
    named = {
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
        "mismatch/kl_k1": mismatch_kl(spec, dose) / 2,
        "mismatch/kl_k3": mismatch_kl(spec, dose),
        "tis/mean": 0.98,
        "tis/clipped": 0.01,
        "calib/low": 0.7 + 0.01 * spec.seed,
        "calib/high": 1.3,
        "calib/target_q": 0.01,
        "calib/ref_tokens": 400.0,
        "phantom/low_neg": phantom_low_neg(spec, step, dose),
        "phantom/missed_neg": phantom_missed_neg(spec, step),
        "time/calib_s": 0.1,
        "tok/calib": 192,
    }
    row = {k: named.get(k, 0.5) for k in sorted(keys)}  # 0.5: a key no test reads (lr, grad_norm, ...)
    if spec.run_id == NO_KL:
        del row["mismatch/kl_k1"], row["mismatch/kl_k3"]
    return row


def steps_of(spec: RunSpec) -> int:
    return {DIVERGED: 7, FAILED: 3}.get(spec.run_id, STEPS)


def write_run(runs_dir: Path, spec: RunSpec, cfg: ExperimentConfig) -> None:
    run_dir = runs_dir / spec.run_id
    n = steps_of(spec)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json")))
    dose = cfg.fp8_for(spec.condition).noise_scale if spec.spec.fp8 else 1.0
    lines = [json.dumps(metrics_row(spec, s, dose)) for s in range(1, n + 1)]
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
    if "calib" in METRIC_KEYS["throughput_phases"][spec.algo][spec.variant]:
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
    ckpt = f"results/{cfg.tier}/runs/{spec.run_id}/checkpoint"
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


MECHANISM_CONDITIONS = [
    *({"name": f"{fmt}_s{s}", "fp8": {"format": fmt, "noise_scale": s}} for fmt in ("hybrid", "e5m2") for s in (1, 2, 4)),
    {"name": "hybrid_s1_nokv", "fp8": {"format": "hybrid", "noise_scale": 1, "kv_cache": False}},
]  # fmt: skip
MECHANISM_GRANULARITIES = ["tensorwise", "blockwise"]
MECHANISM_SEEDS = [0, 1, 2]


def write_mechanism_tier(tmp_path: Path) -> ExperimentConfig:
    """Write a synthetic tier with FP8 conditions (grpo × bf16, fp8, fp8_calib × MECHANISM_GRANULARITIES
    × MECHANISM_CONDITIONS × 3 seeds) under tmp_path/results; returns its config."""
    results = tmp_path / "results"
    raw = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    raw |= {"tier": "mechanism", "results_dir": str(results)}
    raw["matrix"] = {
        "algorithms": ["grpo"],
        "models": ["tiny"],
        "variants": ["bf16", "fp8", "fp8_calib"],
        "granularities": MECHANISM_GRANULARITIES,
        "seeds": MECHANISM_SEEDS,
        "conditions": MECHANISM_CONDITIONS,
    }
    config = tmp_path / "mechanism.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    cfg = load_config(config)
    for spec in cfg.runs():
        write_run(results / cfg.tier / "runs", spec, cfg)
    return cfg


def seeds_used(cfg: ExperimentConfig, algo: str, variant: str) -> list[RunSpec]:
    """The runs of a variant that the comparison table averages (ok or diverged)."""
    return [
        s for s in cfg.runs() if s.algo == algo and s.variant == variant and s.run_id not in (FAILED, MISSING)
    ]


def finite(x: float) -> bool:
    return math.isfinite(x)


def consistent_manifest(tier: Path, **fields) -> dict:
    """A `report.json` for the files under `tier` as a report writes it: the sha256 of each (a
    report.html written first, agreeing with `fields`' recorded values as a built page does), and the
    fields verification checks against that page."""
    from fp8rl.io import sha256_file
    from fp8rl.publication.publish import page_fragments

    manifest = {"config_digest": "0" * 16, "git_commit": None, "generated": "2026-01-01 00:00:00 UTC",
                "numerics": {"modes": ["reproducible"]}, "status_counts": {"ok": 1}, "problems": []} | fields  # fmt: skip
    (tier / "report.html").write_text("\n".join(page_fragments(manifest).values()) + "\n")
    files = {p.relative_to(tier).as_posix(): sha256_file(p) for p in sorted(tier.rglob("*")) if p.is_file()}
    return manifest | {"files": files}
