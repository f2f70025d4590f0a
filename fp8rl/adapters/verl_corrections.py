"""A variant's mismatch correction and precision as verl 0.9.1 settings (`algorithm.rollout_correction`,
the Megatron and vLLM dtypes).

| fp8rl correction | verl 0.9.1 |
|---|---|
| `none` | `rollout_is: null` |
| `tis` | `rollout_is: token` (or `tis.level`), `rollout_is_threshold: cap` |
| `seq_tis` | `rollout_is: sequence`, `rollout_is_threshold: cap` |
| `mis` | `rollout_is: token`, `rollout_is_threshold: cap`, `rollout_rs: seq_mean_k1`, `rollout_rs_threshold: "1/high_1/low"` |
| `icepop` | `rollout_is: token`, `rollout_is_threshold: "alpha_beta"` |

verl's `seq_mean_k1` statistic is the sequence mean of `rollout - old` (the log of the inverse ratio), so
fp8rl's band `[low, high]` on the geometric-mean ratio becomes verl's `[1/high, 1/low]`. The rejected
sequences leave verl's response mask, as they leave the reference trainer's loss mask.
`fp16` sets `actor_rollout_ref.{actor,ref}.megatron.dtype` and `actor_rollout_ref.rollout.dtype` to
`float16`: Megatron then trains with its dynamic loss scaler (initial scale 32768) and vLLM samples in
FP16. What verl cannot express is refused by `check_corrections` (an IcePop band starting at 0: verl
needs a positive lower bound), and so is score centering, whose inputs verl 0.9.1 does not hand a
policy loss (`NOT_ON_VERL`). It needs, at every sampled position, the sampler's next-token distribution
`q` and the trainer's log-probs of those tokens with their gradient (fp8rl.rl.corrections.scorecenter).
verl's vLLM rollout asks for the sampled token's log-prob only (`logprobs: 0`, agent_loop) and keeps
that one; a policy loss gets the sampled tokens' log-probs only; verl computes other tokens' log-probs
with a gradient only inside its distillation path (`distillation.distillation_loss.use_topk`: a
teacher's top-k `prompt_logprobs` and a forward-KL term in the Megatron logits processor, with no
per-token advantage). A top-k reading would need vLLM's `logprobs: k` kept per generated token and
carried through TransferQueue, and a logits-processor term `A_t sum_{v in top-k} c_v log pi(v)`: `q`
truncated to its top k entries (the mass outside them neither centred nor counted in `sc/mass`), and,
for `tis_scorecenter`, `pi_old` known only at those k tokens. It runs in the reference trainer.

QuRL's adaptive clip range (`qurl`) measures its gap from verl's untruncated token ratios (below),
through its own loss `fp8rl_qurl` (fp8rl.adapters.verl_qurl): on verl the gap is the trainer/rollout
ratio's, in the reference trainer the FP8 ratio's against its BF16 shadow (that module says how the two
differ).

Adaptive IcePop (`icepop_adaptive`) sets its band from the ratios themselves, which verl's fixed
`rollout_is_threshold` cannot: verl is set to hand the loss the untruncated token ratios
(`rollout_is: token`, `rollout_is_threshold: RAW_RATIO_THRESHOLD`, above every ratio verl's log-ratio
clamp lets through), and the registered loss `fp8rl_icepop_adaptive` (fp8rl.adapters.verl_icepop)
applies fp8rl's adaptive-IcePop weights to them (`CORRECTION_LOSSES`; `fp8rl_qurl` reads the same
ratios for its gap). verl calls the adaptive-IcePop loss once per
micro-batch, so the band is set per micro-batch there, per step in the reference trainer
(docs/paper_deviations.md).
"""

from __future__ import annotations

from fp8rl.config import ExperimentConfig
from fp8rl.vocabulary import ADAPTIVE_ICEPOP_MASK_FRAC, ICEPOP_BAND, MIS_BAND, VariantSpec

RC = "algorithm.rollout_correction"

# correction -> what verl 0.9.1 lacks to run it (module docstring)
_SC = (
    "the sampler's next-token distributions and the trainer's log-probs of those tokens with their "
    "gradient (verl's rollout keeps the sampled token's log-prob only, and a policy loss gets only the "
    "sampled tokens')"
)
NOT_ON_VERL = {"scorecenter": _SC, "tis_scorecenter": _SC}

# correction -> the fp8rl policy loss (registered in verl) that applies it to verl's raw ratios
CORRECTION_LOSSES = {"icepop_adaptive": "fp8rl_icepop_adaptive", "qurl": "fp8rl_qurl"}

# correction -> verl's `rollout_is` (`tis`: its `tis.level`); a correction outside it and NOT_ON_VERL is
# one verl has not been mapped to yet, refused by check_corrections
ROLLOUT_IS = {"none": None, "tis": "token", "seq_tis": "sequence", "mis": "token", "icepop": "token",
              "icepop_adaptive": "token", "qurl": "token"}  # fmt: skip

# verl's rollout IS threshold that truncates no ratio: verl clamps the log-ratio at +-20 (SAFETY_BOUND,
# as fp8rl's LOG_RATIO_CLAMP) before exp, and exp(20) < 5e8 < this
RAW_RATIO_THRESHOLD = 1e9


def _band(cfg: ExperimentConfig, kind: str) -> tuple[float, float]:
    t = cfg.tis
    return tuple(t.icepop or ICEPOP_BAND) if kind == "icepop" else tuple(t.mis or MIS_BAND)


def check_corrections(cfg: ExperimentConfig, variant: VariantSpec) -> str | None:
    """Why verl cannot run this variant's correction (a message naming the key), or None."""
    if variant.correction in NOT_ON_VERL:
        return (
            f"variant {variant.name}: correction {variant.correction!r} needs "
            f"{NOT_ON_VERL[variant.correction]}, which verl 0.9.1 does not give a policy loss; "
            "it runs in the reference trainer (backend: reference)"
        )
    if variant.correction not in ROLLOUT_IS:
        return (
            f"variant {variant.name}: correction {variant.correction!r} has no verl mapping "
            "(fp8rl.adapters.verl_corrections ROLLOUT_IS); it runs in the reference trainer (backend: reference)"
        )
    if variant.calib and variant.correction in CORRECTION_LOSSES:
        return (
            f"variant {variant.name}: calibrated clipping and {variant.correction!r} are two verl policy "
            f"losses (calibrated_clip, {CORRECTION_LOSSES[variant.correction]}); verl runs one"
        )
    if variant.correction == "icepop" and _band(cfg, "icepop")[0] <= 0:
        return f"tis.icepop: verl's IcePop threshold needs a positive lower bound, got {list(_band(cfg, 'icepop'))}"
    return None


def correction_overrides(cfg: ExperimentConfig, variant: VariantSpec) -> dict[str, object]:
    """verl's `algorithm.rollout_correction` keys for the variant's correction (module table)."""
    t, kind = cfg.tis, variant.correction
    level = t.level if kind == "tis" else ROLLOUT_IS[kind]
    threshold: object = RAW_RATIO_THRESHOLD if kind in CORRECTION_LOSSES else t.cap
    if kind == "icepop":
        lo, hi = _band(cfg, "icepop")
        threshold = f"{lo!r}_{hi!r}"
    out: dict[str, object] = {f"{RC}.rollout_is": level, f"{RC}.rollout_is_threshold": threshold}
    if kind == "mis":
        lo, hi = _band(cfg, "mis")
        out[f"{RC}.rollout_rs"] = "seq_mean_k1"
        out[f"{RC}.rollout_rs_threshold"] = f"{1.0 / hi!r}_{1.0 / lo!r}"
    return out


def policy_loss_mode(variant: VariantSpec) -> str:
    """verl's `policy_loss.loss_mode` for the variant: one of fp8rl's registered losses."""
    if variant.calib:
        return "calibrated_clip"
    return CORRECTION_LOSSES.get(variant.correction, "fp8rl_clip")


def correction_loss_spec(cfg: ExperimentConfig, variant: VariantSpec) -> dict[str, object]:
    """What a `CORRECTION_LOSSES` loss reads from the run's loss spec (verl_overrides.loss_spec), {}
    for every other variant: adaptive IcePop's starting band and largest masked fraction (QuRL reads
    only verl's clip ratios)."""
    if variant.correction != "icepop_adaptive":
        return {}
    frac = cfg.tis.icepop_mask_frac
    return {
        "icepop_adaptive": {
            "band": list(_band(cfg, "icepop")),
            "mask_frac": ADAPTIVE_ICEPOP_MASK_FRAC if frac is None else float(frac),
        }
    }


def precision_overrides(variant: VariantSpec) -> dict[str, object]:
    """The fp16 arm: FP16 Megatron training (with its dynamic loss scaling) and FP16 vLLM rollout."""
    if not variant.fp16:
        return {}
    return {
        "actor_rollout_ref.actor.megatron.dtype": "float16",
        "actor_rollout_ref.ref.megatron.dtype": "float16",
        "actor_rollout_ref.rollout.dtype": "float16",
    }
