"""A condition's `calib` override reaches the loss: two tiny fp8_tis_calib runs that differ only in
their condition's `calib.upper` log different upper clip bounds (`calib/high`)."""

from __future__ import annotations

import pytest

CONDITIONS = [
    {"name": "prop", "fp8": {"noise_scale": 4.0}},
    {
        "name": "fixed",
        "fp8": {"noise_scale": 4.0},
        "calib": {"upper": "fixed"},
        "variants": ["fp8_tis_calib"],
    },
]
OVERRIDES = {
    "matrix.conditions": CONDITIONS,
    "matrix.seeds": [0],
    "schedule.steps": 2,
    # a fixed target > 0: the proportional upper bound moves with the calibrated lower one at every update
    "calib.reference": "static:0.1",
}


@pytest.mark.usefixtures("restore_torch_globals")
def test_fixed_upper_keeps_one_plus_clip_high_and_proportional_moves(train, tmp_path):
    runs = {}
    for cond in ("prop", "fixed"):
        trainer, summary, rows = train(
            f"grpo/tiny/fp8_tis_calib/tensorwise/{cond}/seed0", tmp_path / cond, OVERRIDES
        )
        assert summary["status"] == "ok"
        assert summary["base"] == {"name": "tiny", "seed": None, "sft_seed": 7}  # the tier's shared base
        assert trainer.resolved.calib.upper == ("fixed" if cond == "fixed" else "proportional")
        runs[cond] = [r["calib/high"] for r in rows]
    clip_high = 0.2  # the tiny tier's grpo clip_high
    assert runs["fixed"] == pytest.approx([1 + clip_high] * len(runs["fixed"]))
    assert all(abs(h - (1 + clip_high)) > 1e-3 for h in runs["prop"]), runs
