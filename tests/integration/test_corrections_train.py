"""Every mismatch-correction variant and the fp16 arm train 2 steps through the reference trainer."""

from __future__ import annotations

import math

import pytest

from fp8rl.vocabulary import MISMATCH_ALIASES, VARIANT_SPECS

NEW = ("fp8_seqtis", "fp8_seqtis_calib", "fp8_mis", "fp8_mis_calib", "fp8_icepop", "fp8_icepop_calib", "fp16")


def _overrides(variant: str) -> dict:
    return {
        "matrix.variants": ["bf16", variant],
        "matrix.variant_granularities": {},
        "schedule.steps": 2,
        # a band the tiny model's FP8 mismatch leaves often enough to drop some sequences, not all
        "tis.mis": [0.97, 1.03],
    }


@pytest.mark.parametrize("variant", NEW)
def test_new_variant_trains_two_steps(tier, train, tmp_path, restore_torch_globals, variant):
    spec = VARIANT_SPECS[variant]
    gran = "tensorwise" if spec.fp8 else "none"
    _, summary, rows = train(f"grpo/tiny/{variant}/{gran}/seed0", tmp_path / variant, _overrides(variant))
    assert summary["status"] == "ok", summary["reason"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert set(MISMATCH_ALIASES) <= set(row)
        assert row["rollout_corr/kl"] == pytest.approx(row["mismatch/kl_k1"])
        assert row["mismatch_kl"] == pytest.approx(row["mismatch/kl_k3"])
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
    if spec.corrected:
        assert all("tis/mean" in r or r.get("tis/seq_masked") == 1.0 for r in rows)
    if spec.correction in ("mis", "icepop"):
        assert all("tis/masked" in r for r in rows)
    if spec.correction == "mis":
        assert all("tis/seq_masked" in r for r in rows)
    if spec.calib:
        assert all("calib/low" in r for r in rows)
    if spec.fp16:
        assert all(r["loss_scale/scale"] > 0 for r in rows)
        assert "tis/mean" not in rows[0] and "phantom/low_neg" not in rows[0]
