"""Public figures of the trainer-vs-rollout mismatch of real RL stacks (late 2026), the yardstick every
CPU setting is placed against (docs/mismatch.md renders them as the `real-stacks` block; the mismatch
calibration table divides by `REAL_BF16_KL`). Inputs from public sources, not results of this project:
each row is (setting, figure, source), per token on sampled tokens, dense models of 1-9B parameters
unless the row says otherwise."""

from __future__ import annotations

from pathlib import Path

from fp8rl.quotes.registry import quoted_block
from fp8rl.report.formats import markdown_table
from fp8rl.vocabulary import REAL_BF16_KL  # the trainer-vs-rollout per-token KL of a healthy BF16 stack

__all__ = ["FIGURES", "REAL_BF16_KL", "real_stacks"]

FIGURES = (
    (
        "BF16 trainer vs BF16 rollout engine",
        "|Δlogp| ≈ 0.01, KL ≈ 1–2e-3; tmpe below 1.03–1.05 called acceptable",
        "NeMo-RL documentation and CI; vime issue 64",
    ),
    (
        "end-to-end blockwise FP8 (trainer and rollout)",
        "0.7–1.6× the BF16 level (generation KL 0.0014–0.0031 against 0.002)",
        "NeMo-RL FP8 CI suites",
    ),
    (
        "FP8 rollout, BF16 trainer",
        "1.5–4× the BF16 level; mixture-of-experts models up to 26× |Δlogp|",
        "verl PR 7519, miles PR 1678",
    ),
    ("tensorwise FP8 over training", "grows about 3× in 32 steps (MXFP8 stays flat)", "verl PR 7519"),
    (
        "scale format / weight-rounding path / activation-scale granularity",
        "1.55× / 25× / 18×",
        "prime-rl 3112, xtuner 2044, verl 0.10 release notes",
    ),
    ("master-weight and optimizer precision at a fixed learning rate", "about 50×", "AReaL PR 1634"),
)


@quoted_block("real-stacks")
def real_stacks(_published: Path) -> str:
    """The quoted block: the public figures as a markdown table (the publications are not read)."""
    rows = [[s, f.replace("|", "\\|"), src] for s, f, src in FIGURES]
    return markdown_table(["setting", "figure", "source"], rows)
