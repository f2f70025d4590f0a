"""Every figure of a tier's report, in one table: its name (the files `plots/{name}.png` and `.svg`), the
part of the report that has it and its caption in report.html.

`CORE` figures are in every report (fp8rl.report.plots draws them), `MECHANISM` ones in tiers with FP8
conditions (fp8rl.report.mechanism), `STABILITY` ones in tiers with a noise-dose axis
(fp8rl.report.stability_plots), `STUDY_SURVIVAL` and `STUDY_GAP` in study tiers without one (a survival
curve per arm, fp8rl.report.study_survival; each arm's reward gap to the control per step,
fp8rl.report.study_gap), `STUDY_ENDPOINT` in every study tier (each arm's endpoint,
fp8rl.report.study_endpoint), `HELDOUT_CURVE` in tiers that score their kept checkpoints
(fp8rl.report.heldout_curve). `ReportPaths` lists the files from here and the HTML report takes the
captions from here; the drawing modules key their builders by these names. No matplotlib: the DAG reads
this to know a report's outputs.
"""

from __future__ import annotations

from pathlib import Path

CORE = {
    "reward": "Reward and accuracy vs step",
    "resp_len": "Response length vs step",
    "entropy": "Entropy vs step",
    "clip_low_neg": "clip/low_neg vs step (A<0 tokens below the lower clip bound: zero gradient)",
    "calib_bounds": "Calibrated clip bounds (calib/low, calib/high) vs the fixed 1-ε_low, 1+ε_high",
    "mismatch_kl": "Rollout/trainer mismatch KL (mismatch/kl_k3) vs step",
    "ratio_tails": "PPO-ratio tails per step (ratio/p01, ratio/p99)",
    "ratio_hist": "Per-token PPO ratio, FP8 vs the BF16 shadow pass of the same tokens",
    "eval_scores": "Eval scores: seed mean, 95% t-interval cut to [0, 1], each seed",
    "throughput": "Throughput per phase",
}
MECHANISM = {
    "mechanism_excess_clip": "Excess clipping (phantom/low_neg − phantom/missed_neg) vs FP8 noise dose, "
    "per granularity, with 95% t-intervals over the seeds' step means",
    "mechanism_mismatch_kl": "Mismatch KL (trainer vs rollout) vs FP8 noise dose, per granularity, "
    "with 95% t-intervals over the seeds' step means",
}
STABILITY = {
    "survival": "Runs not yet diverged vs step (Kaplan-Meier), per variant and fp8.noise_scale dose",
    "stability_curves": "Entropy, reward and clip/low_neg vs step (seed mean, band: the middle half of "
    "the seeds): "
    "top every variant at dose 1, bottom the dose sweep",
    "breaking_dose": "Fraction of runs diverged vs fp8.noise_scale dose, exact 95% intervals (dashed: one "
    "half; the horizontal bar at one half: the ED50's 95% interval, its dot the estimate)",
}
STUDY_SURVIVAL = {
    "study_survival": "Runs not yet diverged vs step (Kaplan-Meier; runs that did not diverge censored at "
    "their last step), per arm of the pre-registered study",
}
STUDY_GAP = {
    "study_reward_gap": "Each arm's reward minus the bf16 control's vs step, paired the way the planned "
    "test pairs (within base for study.unit: base), with its 95% interval; shaded: the endpoint's window",
}
STUDY_ENDPOINT = {
    "study_endpoint": "Each arm's pre-registered endpoint: mean over the units with its 95% t-interval, each "
    "unit's value a dot; shaded: the bf16 control's interval",
}
HELDOUT_CURVE = {
    "heldout_curve": "The held-out bf16 endpoint over training: each arm's mean over the units at its base "
    "(step 0), every kept checkpoint and the final one, with its 95% t-interval",
}
CAPTIONS = {
    **CORE,
    **MECHANISM,
    **STABILITY,
    **STUDY_SURVIVAL,
    **STUDY_GAP,
    **STUDY_ENDPOINT,
    **HELDOUT_CURVE,
}


def caption(name: str, axis: str | None = None) -> str:
    """The caption of figure `name`; a stability figure along a target-KL axis (`axis`, the fp8 key the
    conditions sweep: fp8rl.report.paths.noise_axis) names that axis instead of the noise dose."""
    text = CAPTIONS[name]
    swept = axis not in (None, "noise_scale") and name in STABILITY
    return text.replace("fp8.noise_scale dose", f"fp8.{axis}") if swept else text


def captioned(figures: dict[str, list[Path]], axis: str | None = None) -> list[tuple[Path, str]]:
    """Each written figure (name -> its files, the PNG first) as (PNG, `caption`): what a report section
    returns for report.html."""
    return [(files[0], caption(name, axis)) for name, files in figures.items()]
