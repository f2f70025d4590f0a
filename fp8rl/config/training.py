"""How a training run proceeds: the RL schedule, the task it learns, the SFT warm start that makes a
scratch model's base, and when a run counts as diverged."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fp8rl.config.base import SEED_MAX, Strict
from fp8rl.vocabulary import ON_DIVERGENCE

STEPS_MAX = (
    100_000  # RL steps of one run: the paper's runs take 500; a bound keeps a typo from running for ever
)


class ScheduleConfig(Strict):
    """The RL schedule of every training run: steps, batch, optimizer, rollout sampling and
    checkpoints."""

    OMIT_AT_DEFAULT = ("remove_padding", "keep_every", "log_samples", "sampler_draw")

    steps: int = Field(20, gt=0, le=STEPS_MAX, description="RL optimizer steps (one rollout batch each)")
    prompts_per_step: int = Field(
        8, gt=0, description="prompts per step, each sampled group_size times (DAPO keeps at most this many)"
    )
    ppo_epochs: int = Field(
        1,
        gt=0,
        description="passes over each step's rollout batch (updates per step: ppo_epochs x mini_batches)",
    )
    mini_batches: int = Field(2, gt=0, description="optimizer updates per epoch")
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate of the policy (after the warm-up)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, gt=0.0, description="clip the gradient's global L2 norm to this")
    warmup_steps: int = Field(
        0, ge=0, description="linear learning-rate warm-up over the first N steps; 0: lr from the start"
    )
    max_new_tokens: int = Field(
        8, gt=0, description="response length limit, tokens (rollout, DAPO's overlong limit, held-out eval)"
    )
    temperature: float = Field(
        1.0, gt=0.0, description="sampling temperature of the rollout; the trainer scores log-probs at it too"
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling of the rollout; 1: off")
    sampler_draw: Literal["multinomial", "inverse_cdf"] = Field(
        "multinomial",
        description="how the training rollout draws each token from its distribution "
        "(fp8rl/engine/token_draw.py): `multinomial` (torch.multinomial: one exponential variate per "
        "vocabulary entry, the default of every published tier) or `inverse_cdf` (one fp64 uniform per row "
        "against the row's fp64 cumulative sums: the same distribution, other tokens for a seed, much "
        "cheaper over a large vocabulary). The held-out evaluation always draws by `multinomial`",
    )
    checkpoint_every: int = Field(
        5,
        gt=0,
        description="checkpoint every N steps and at the last one (verl: at most N steps between saves)",
    )
    keep_every: int | None = Field(
        None,
        gt=0,
        description="keep the policy's weights every N steps in checkpoints/step{N}/ (Hugging Face files, "
        "for `fp8rl eval heldout` of mid-run checkpoints); None keeps only the final checkpoint",
    )
    log_samples: int = Field(
        0,
        ge=0,
        le=4096,
        description="write the first N samples of every step, and up to N more the gibberish detector "
        "flags (index, text, reward, format check, gibberish reason), to the run's samples.jsonl; 0 writes "
        "none",
    )
    remove_padding: bool = Field(
        False,
        description="the reference trainer's forwards run on real tokens only, every sequence packed end "
        "to end into one row (as verl's use_remove_padding); false: on the rollout batch's padded layout "
        "(the default of configs written before it)",
    )


class SubwordTokenizerConfig(Strict):
    """The byte-level BPE `fp8rl data` trains for scratch models with `tokenizer: bpe`
    (fp8rl.engine.bpe_tokenizer): its size and the filler text beside the task's training rows."""

    vocab_size: int = Field(4096, ge=300, le=262_144, description="tokens, the special tokens included")
    filler_sentences: int = Field(20_000, ge=0, le=10_000_000, description="generated filler sentences")


class TaskConfig(Strict):
    """The RL task: synthetic arithmetic (smoke/cpu), story problems with written reasoning (longform)
    or a math dataset (paper); `tokenizer`: the subword tokenizer the data step trains, if any."""

    OMIT_AT_DEFAULT = ("tokenizer",)

    name: str = Field(
        "arithmetic",
        description="the task: arithmetic, word_problems, longform or gsm8k (reference trainer); "
        "dapo-math-17k (verl)",
    )
    levels: list[str] = Field(
        ["add2"],
        description="a generated task's levels, cycled through (fp8rl.engine.tasks); a hub dataset: [all]",
    )
    n_train: int = Field(2000, gt=0, description="training problems (a dataset task: at most this many)")
    n_test: int = Field(200, gt=0, description="test problems, none of them in training")
    seed: int = Field(
        1234,
        ge=0,
        le=SEED_MAX,
        description="seed of the data splits (generation, shuffle); the SFT's seeds derive from it",
    )
    tokenizer: SubwordTokenizerConfig | None = Field(
        None, description="the subword tokenizer `fp8rl data` trains for `tokenizer: bpe` models; None: none"
    )


class SFTConfig(Strict):
    """BF16 warm start that produces the tier's base model (scratch models only): one shared by every
    run, one per RL seed (`per_seed`), or `bases` of them with several RL seeds each (run seed s starts
    from base s % bases, and base b is the base `per_seed` trains for seed b: same SFT seed, same
    directory, so per-seed bases are reused)."""

    # Added after configs were published: left out of the dump at their defaults.
    OMIT_AT_DEFAULT = ("bases", "stop_at_accuracy", "check_every", "check_prompts", "on_unmet_stop")

    steps: int = Field(
        300, ge=0, description="SFT optimizer steps (the most it trains with stop_at_accuracy)"
    )
    batch_size: int = Field(64, gt=0, description="training rows per SFT step (drawn with replacement)")
    lr: float = Field(
        3e-3, gt=0.0, description="peak AdamW learning rate: warm-up over steps/20, cosine decay to 10 %"
    )
    per_seed: bool = Field(
        False,
        description="one base model per RL seed (its SFT seeded from the run's seed), so that intervals "
        "over seeds include the base model's variance; false: one base shared by every run",
    )
    stop_at_accuracy: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="stop the SFT at the first check where the base's sampled accuracy (temperature "
        "schedule.temperature) on `check_prompts` training prompts reaches this, so that bases of "
        "different seeds start RL from about the same reward; `steps` stays the most it trains (and "
        "sets the learning-rate schedule); None: always train `steps`",
    )
    check_every: int = Field(25, gt=0, description="SFT steps between the checks of stop_at_accuracy")
    on_unmet_stop: Literal["refuse", "keep"] = Field(
        "refuse",
        description="a base whose SFT reaches `steps` without meeting stop_at_accuracy: refuse (`fp8rl sft` "
        "fails naming it, no base is written) or keep (the base is used, and sft.json, the base models "
        "table and SUMMARY.md say it missed the rule)",
    )
    check_prompts: int = Field(
        256, gt=0, description="training prompts (a fixed random subset) each check samples once"
    )
    bases: int | None = Field(
        None,
        ge=1,
        description="with per_seed: train this many bases (seeds 0 .. bases-1) and start RL seed s from "
        "base s % bases, so each base carries several RL seeds; None: one base per RL seed",
    )

    @model_validator(mode="after")
    def _bases_need_per_seed(self) -> SFTConfig:
        if self.bases is not None and not self.per_seed:
            raise ValueError(
                f"bases: {self.bases} needs per_seed: true (bases are the per-seed bases 0 .. "
                f"{self.bases - 1}, shared among RL seeds); with per_seed: false every run shares one base"
            )
        return self

    def base_seed(self, run_seed: int) -> int | None:
        """The seed of the base RL seed `run_seed` starts from (the `--seed` of its `fp8rl sft`, its
        directory `base/{model}/seed{b}`): None for the shared base, the run's seed with `per_seed`,
        `run_seed % bases` with `bases`."""
        if not self.per_seed:
            return None
        return run_seed if self.bases is None else run_seed % self.bases


class StabilityConfig(Strict):
    """Divergence detection (fp8rl.rl.stability): NaN/inf, an entropy spike (above k x its early median
    for m consecutive steps), an entropy collapse, gibberish and reward collapse (each for `patience`
    consecutive steps; None turns a detector off), and what a run does once it has diverged."""

    entropy_spike_k: float = Field(3.0, gt=1.0, description="entropy above k x the baseline is a spike")
    entropy_spike_m: int = Field(3, gt=0, description="consecutive spike steps that diverge")
    baseline_steps: int = Field(5, gt=0, description="steps whose median entropy is the baseline")
    entropy_collapse_frac: float | None = Field(
        0.01, gt=0.0, lt=1.0, description="entropy below this fraction of the baseline is a collapse"
    )
    entropy_floor: float | None = Field(
        1e-6, gt=0.0, description="entropy (nats per token) below it is a collapse, baseline or not"
    )
    gibberish_max: float | None = Field(0.5, ge=0.0, lt=1.0, description="gibberish/rate above it diverges")
    reward_collapse_frac: float | None = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="windowed mean reward below this fraction of its best, after learning",
    )
    reward_window: int = Field(5, gt=0, description="steps of the moving mean reward")
    reward_min_peak: float = Field(
        0.1, ge=0.0, description="the best windowed mean reward that counts as having learned"
    )
    patience: int = Field(
        3, gt=0, description="consecutive steps for collapse, gibberish and reward collapse"
    )
    on_divergence: Literal[ON_DIVERGENCE] = Field(
        "stop", description="stop at the first divergence, or keep training and record the whole trajectory"
    )
