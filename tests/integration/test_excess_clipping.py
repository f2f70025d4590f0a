"""The mechanism in a real trainer run: an FP8 run clips negative-advantage tokens that its BF16 shadow
would not (`phantom/low_neg`) more often than the reverse (`phantom/missed_neg`), and more so as the FP8
error grows (`fp8.noise_scale`).

Settings: the tiny tier at a learning rate its policy survives (3e-4; the tier's 2e-3 collapses the
reward within 3 steps, leaving no negative-advantage tokens), 4 updates per step so the policy moves
between them, and every sequence re-scored by the shadow pass. Rowwise scaling: a token's FP8 forward
does not depend on the rest of its batch, so an FP8 ratio differs from its shadow's only through the FP8
error (with tensorwise scales, scoring a mini-batch instead of the whole batch moves the scales too).
Sums over 3 steps and 3 seeds; at dose 16 each of 6 seeds tried clipped more under FP8 than under its
shadow (excess +0.18 to +0.32, summed per-step fractions), at dose 1 the excess was -0.02 to +0.05.
"""

from __future__ import annotations

import pytest

PAIRED = {
    "schedule.steps": 3,
    "schedule.lr": 3e-4,
    "schedule.mini_batches": 4,
    "schedule.prompts_per_step": 12,
    "calib.sample_frac": 0.99,
}
SEEDS = (0, 1, 2)


def _phantom_sums(train, tmp_path, noise_scale: float) -> tuple[float, float]:
    """(Σ phantom/low_neg, Σ phantom/missed_neg) over the steps of plain-fp8 rowwise runs, one per seed."""
    low = missed = 0.0
    for seed in SEEDS:
        overrides = {**PAIRED, "fp8.noise_scale": noise_scale, "matrix.seeds": list(SEEDS)}
        out = tmp_path / f"dose{noise_scale:g}_seed{seed}"
        _, summary, rows = train(f"grpo/tiny/fp8/rowwise/seed{seed}", out, overrides)
        assert summary["status"] == "ok", summary["reason"]
        paired = [r for r in rows if "phantom/low_neg" in r]
        assert len(paired) == PAIRED["schedule.steps"]  # every step had shadow-scored negative tokens
        low += sum(r["phantom/low_neg"] for r in paired)
        missed += sum(r["phantom/missed_neg"] for r in paired)
    return low, missed


@pytest.mark.slow
def test_fp8_run_clips_more_than_its_bf16_shadow_and_more_with_the_dose(
    tier, train, tmp_path, restore_torch_globals
):
    low16, missed16 = _phantom_sums(train, tmp_path, 16.0)
    low1, missed1 = _phantom_sums(train, tmp_path, 1.0)
    assert low16 > 2 * missed16, (low16, missed16)
    assert low16 - missed16 > (low1 - missed1) + 0.2, (low16 - missed16, low1 - missed1)
    assert low16 > 5 * low1  # the phantom clipping itself grows with the FP8 error
