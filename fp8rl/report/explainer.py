"""The report's short explanation of the mechanism, shown in report.html above the numbers.

Plain text in the project's own words (docs/architecture.md#calibrated-clipping has the definition):
what phantom clipping is, what each variant changes, and how to read the figures that show it.
"""

from __future__ import annotations

# (term, explanation), in reading order
MECHANISM = (
    (
        "Phantom clipping",
        "PPO-clip gives zero gradient to a token with negative advantage (A<0) whose ratio "
        "r = π_θ/π_old is below the lower bound 1-ε_low: the update does not push that bad token down. "
        "In fully-FP8 training, quantization noise in the forward pass, the gradients and the optimizer "
        "state widens the distribution of r, so more A<0 tokens fall below the bound than a BF16 run "
        "would clip. Those extra zeroed gradients are the phantom clips (clip/low_neg above bf16's, "
        "phantom/low_neg per shadow token): bad outputs go unpunished and accumulate, until entropy "
        "spikes and the run diverges.",
    ),
    (
        "bf16",
        "The reference: every GEMM, the optimizer state and the rollout in BF16 (emulated on CPU).",
    ),
    (
        "fp8",
        "Fully FP8: forward and backward GEMMs, the Adam moments and the rollout copy, at the run's "
        "scaling granularity. A BF16 shadow pass re-scores a sample of sequences for the diagnostics "
        "only (the 'shadow pass' bar of the throughput plot); it changes no update.",
    ),
    (
        "fp8_tis",
        "fp8 plus truncated importance sampling: each token's loss is weighted by "
        "min(π_trainer/π_rollout, cap), which corrects the rollout/trainer mismatch "
        "(mismatch/kl_k3) but not the ratio noise inside the trainer.",
    ),
    (
        "fp8_calib",
        "fp8 with Calibrated Clipping: the lower bound moves (calib/low) so that the fraction of A<0 "
        "tokens clipped below matches what BF16 clips on the same tokens (the shadow pass, or the "
        "matching bf16 run), and the upper bound (calib/high) is rebalanced to match. The algorithm "
        "is otherwise unchanged; fp8_tis_calib combines both fixes.",
    ),
    (
        "Reading the curves",
        "Each line is a series' mean over seeds (a series: variant, granularity and, in a study tier, "
        "FP8 condition; in a study tier the arm, named as in the tables) and the band the middle half of the seeds (25th to 75th percentile); an x marks a diverged run's last step "
        "(where it stopped, or the end when it trained on). A working fix keeps clip/low_neg near bf16's, entropy without a "
        "spike and reward with bf16. On the calib_bounds plot the dashed lines are the fixed bounds "
        "1-ε_low and 1+ε_high: calib/low below the fixed bound means FP8 noise had widened the ratios.",
    ),
    (
        "Reading the ratio histograms",
        "The per-token ratio plot overlays, for the same shadow tokens, the FP8 ratio (solid) and the "
        "BF16 one (dashed), on log axes, with the fixed bounds dotted. Mass of the solid curve left of "
        "the lower bound that the dashed curve does not have is phantom clipping; the A<0 row is the "
        "population whose gradients it zeroes. The ratio-tail plot shows the per-step 1 % and 99 % "
        "quantiles of r: FP8 tails wider than bf16's are the same effect, step by step.",
    ),
)
