"""Score centering on the tiny tier reads the distributions the FP8 rollout sampled from: its drift
`sc/tv` is above 0 where the rollout and the trainer differ, and a variant without score centering
records nothing."""

from __future__ import annotations

import pytest

from fp8rl.engine.collect import collect_rollouts


def _overrides(variant: str) -> dict:
    return {"matrix.variants": ["bf16", variant], "matrix.variant_granularities": {}, "schedule.steps": 2}


def test_score_centering_sees_the_samplers_drift(tier, train, tmp_path, restore_torch_globals, monkeypatch):
    import fp8rl.engine.trainer as trainer_mod

    recorded = []

    def spy(*args, **kw):
        ro = collect_rollouts(*args, **kw)
        recorded.append(ro.batch is not None and ro.batch.sampler_logp is not None)
        return ro

    monkeypatch.setattr(trainer_mod, "collect_rollouts", spy)
    _, summary, rows = train(
        "grpo/tiny/fp8_scorecenter/tensorwise/seed0", tmp_path / "sc", _overrides("fp8_scorecenter")
    )
    assert summary["status"] == "ok", summary["reason"]
    assert recorded and all(recorded)
    assert all(r["sc/tv"] > 0 and r["sc/mass"] == pytest.approx(1.0) for r in rows)
    recorded.clear()
    train("grpo/tiny/fp8_tis/tensorwise/seed0", tmp_path / "tis", _overrides("fp8_tis"))
    assert recorded and not any(recorded)
