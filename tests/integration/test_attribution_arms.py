"""Every arm of the attribution tier (config/attribution.yaml) trains 2 steps through the reference
trainer on the tiny tier's base model and data, and the tier's report answers its planned contrasts
from those runs (one seed per arm: the contrasts have no interval, the tables still build)."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY_ARCH = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128,
             "max_position_embeddings": 32}  # fmt: skip


def _config(tmp: Path, seeds: list[int]) -> Path:
    raw = yaml.safe_load((ROOT / "config" / "attribution.yaml").read_text())
    raw["results_dir"] = str(tmp / "results")
    raw["models"][0]["arch"] = TINY_ARCH  # the tiny tier's base model (the trainer loads its weights)
    raw["task"] = {"name": "arithmetic", "levels": ["add1"], "n_train": 70, "n_test": 20, "seed": 7}
    raw["schedule"] |= {"steps": 2, "prompts_per_step": 4, "max_new_tokens": 3, "checkpoint_every": 2}
    raw["matrix"]["seeds"] = seeds
    for condition in raw["matrix"]["conditions"]:
        condition["seeds"] = seeds
    raw["study"]["min_seeds"] = len(seeds)
    path = tmp / "attribution.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_every_attribution_arm_trains_two_steps_and_the_report_answers(tier, tmp_path, restore_torch_globals):
    from fp8rl.config_loader import load_config
    from fp8rl.engine.trainer import Trainer
    from fp8rl.report.build import build_report
    from fp8rl.report.paths import ReportPaths
    from fp8rl.run_files import RunDir, runs_dir

    root, _, _ = tier
    cfg = load_config(_config(tmp_path, [0, 1]))
    arms = cfg.study.arms
    assert len(arms) >= 5
    spread = {}
    for arm, prefix in arms.items():
        run = next(r for r in cfg.runs() if r.run_id == f"{prefix}/seed0")
        out = runs_dir(cfg.results_dir, cfg.tier) / run.run_id
        trainer = Trainer(cfg, run, base_dir=root / "base" / "tiny", data_dir=root / "data", out_dir=out,
                          progress=False)  # fmt: skip
        summary = trainer.run()
        assert summary["status"] in ("ok", "diverged"), (arm, summary["reason"])
        rows = RunDir(out).read_metrics()
        assert [r["step"] for r in rows] == [1, 2], arm
        assert all(math.isfinite(r["reward/mean"]) for r in rows), arm
        f = cfg.fp8_for(run.condition)
        if run.spec.fp8:
            # the trainer's dose and the rollout copy's, as the arm's condition sets them
            assert trainer.prec.runtime.noise_scale == f.noise_scale, arm
            rollout_rt = next(m.runtime for m in trainer.prec.rollout.modules() if hasattr(m, "runtime"))
            assert rollout_rt.noise_scale == f.rollout_dose, arm
            assert trainer.ratio_noise.level == f.ratio_noise, arm
            assert "phantom/low_neg" in rows[-1], arm
        if run.spec.calib:
            assert all("calib/low" in r for r in rows), arm
        spread[arm] = max(r["ratio/p99"] - r["ratio/p01"] for r in rows)
    # the synthetic noise widens the ratio's spread over the same bf16 numerics
    assert spread["phantom_fixed"] > spread["bf16"]

    manifest = build_report(cfg)
    assert manifest["study"] is True
    paths = ReportPaths.for_config(cfg)
    planned = (paths.table("planned", "md")).read_text()
    for c in cfg.study.planned:
        assert c.name in planned
    assert all(c.name in paths.table("exploratory", "md").read_text() for c in cfg.study.exploratory)
    arms_md = paths.table("arms", "md").read_text()
    assert all(a in arms_md for a in arms)
