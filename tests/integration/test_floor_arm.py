"""The `bf16_floor` arm end to end: its search reaches a real BF16 stack's KL on the tiny tier, the run
trains with its rollout copy at the found kernel floor and its per-step mismatch lands near the target,
the scale flows into summary.json, endpoints.csv and the mismatch table (≈ 1× the real BF16 figure), and
a resumed run reads the scale back instead of searching again."""

from __future__ import annotations

import json
import statistics

import pytest

from fp8rl.config_loader import load_config
from fp8rl.engine import noise_target
from fp8rl.engine.noise_target import TOLERANCE
from fp8rl.fp8.rollout_copy import RolloutLinear
from fp8rl.vocabulary import REAL_BF16_KL

RUN = "grpo/tiny/bf16_floor/none/seed0"
FLOOR = {"matrix.variants": ["bf16", "bf16_floor", "fp8"], "schedule.steps": 4}


@pytest.mark.slow
def test_floor_run_trains_at_the_real_bf16_kl(tier, train, tmp_path, restore_torch_globals, monkeypatch):
    out = tmp_path / "runs" / RUN
    out.parent.mkdir(parents=True)  # the run's config is written beside it
    trainer, summary, rows = train(RUN, out, FLOOR)
    assert summary["status"] == "ok"
    found = json.loads((out / "noise.json").read_text())
    # the search reaches the default target, a healthy real BF16 stack's KL, at the base
    assert found["target_kl"] == REAL_BF16_KL
    assert abs(found["units"]["mismatch/kl_k3"] - REAL_BF16_KL) <= TOLERANCE * REAL_BF16_KL
    assert found["tried"][0]["scale"] == 1.0 and found["noise_scale"] > 1.0
    assert summary["noise"] == {k: found[k] for k in ("target_kl", "noise_scale", "units")}
    # the run trains at that scale: the rollout copy's linears carry it, the trainer's compute plain bf16
    scale = found["noise_scale"]
    assert trainer.resolved.floor_scale == scale and trainer.resolved.noise_scale == 1.0
    layers = [m for m in trainer.prec.rollout.modules() if isinstance(m, RolloutLinear)]
    assert layers and {m.floor for m in layers} == {scale}
    assert trainer.prec.gemms["rollout"] == f"bf16-emulated, kernel floor {scale:.4g}"
    assert trainer.prec.gemms["policy"] == "bf16-emulated"
    # the trainer's own per-step mismatch (training prompts, moving weights) stays near the target
    kl = [r["mismatch/kl_k3"] for r in rows]
    assert len(kl) == 4 and 0.33 * REAL_BF16_KL < statistics.median(kl) < 3 * REAL_BF16_KL

    # endpoints.csv's `noise` and `target_kl`, and the mismatch table's setting at ≈ 1× the real figure
    from fp8rl.report.endpoints import endpoints_table
    from fp8rl.report.load import load_tier
    from fp8rl.report.mismatch_table import mismatch_table

    cfg = load_config(out.parent / f"{out.name}.yaml")
    endpoints = endpoints_table(load_tier(cfg, tmp_path / "runs"), cfg, tmp_path / "runs").set_index("run_id")
    row = endpoints.loc[RUN]
    assert row["noise"] == scale and row["target_kl"] == REAL_BF16_KL and row["status"] == "ok"
    assert row["mismatch_kl_k3_median"] == pytest.approx(statistics.median(kl))
    table = mismatch_table(endpoints.reset_index(), cfg).set_index("variant")
    setting = table.loc["bf16_floor"]
    assert setting["format"] == "bf16" and setting["target_kl"] == REAL_BF16_KL and setting["noise"] == scale
    assert 0.33 < setting["kl_x_real_bf16"] < 3

    # a resumed (or rerun) run with the same digest reads noise.json back: no second search
    def refuse(*a, **k):
        raise AssertionError("searched again")

    monkeypatch.setattr(noise_target, "find_noise_scale", refuse)
    trainer2, summary2, _ = train(RUN, out, FLOOR)
    assert summary2["noise"] == summary["noise"] and trainer2.resolved.floor_scale == scale


@pytest.mark.slow
def test_a_fixed_floor_scale_needs_no_search(tier, train, tmp_path, restore_torch_globals, monkeypatch):
    monkeypatch.setattr(noise_target, "find_noise_scale", lambda *a, **k: pytest.fail("searched"))
    out = tmp_path / "run"
    trainer, summary, rows = train(RUN, out, {**FLOOR, "floor": {"scale": 4.0}, "schedule.steps": 1})
    assert summary["status"] == "ok" and summary.get("noise") is None and not (out / "noise.json").exists()
    assert {m.floor for m in trainer.prec.rollout.modules() if isinstance(m, RolloutLinear)} == {4.0}
    assert rows[0]["mismatch/kl_k3"] > 1e-7  # the exact bf16 arm's is ~1e-9 and below


@pytest.mark.slow
def test_unreachable_floor_target_names_its_key(tier, train, tmp_path, restore_torch_globals):
    with pytest.raises(ValueError, match=r"floor.target_kl 0.9 is out of reach: kernel floor scale 64"):
        train(RUN, tmp_path / "run", {**FLOOR, "floor": {"target_kl": 0.9}, "schedule.steps": 1})
    assert not (tmp_path / "run" / "noise.json").exists()
