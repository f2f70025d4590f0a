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
needs a positive lower bound), and so are the corrections whose inputs verl 0.9.1 does not hand a
policy loss (`NOT_ON_VERL`): score centering needs the sampler's next-token distributions (verl keeps
only the sampled token's rollout log-prob), QuRL's adaptive clip range a full-precision re-score of the
FP8 actor (verl has no BF16 shadow pass), and adaptive IcePop a band set from the whole step's ratios
(verl's rollout correction takes a fixed threshold); each runs in the reference trainer.
"""

from __future__ import annotations

from fp8rl.config import ExperimentConfig
from fp8rl.vocabulary import ICEPOP_BAND, MIS_BAND, VariantSpec

RC = "algorithm.rollout_correction"

# correction -> what verl 0.9.1 lacks to run it (module docstring)
NOT_ON_VERL = {
    "scorecenter": "the sampler's next-token distributions (verl keeps only the sampled token's log-prob)",
    "tis_scorecenter": "the sampler's next-token distributions (verl keeps only the sampled token's log-prob)",
    "qurl": "a full-precision (BF16 shadow) re-score of the FP8 actor's ratios",
    "icepop_adaptive": "a band set from the step's ratios (verl's rollout_is_threshold is fixed)",
}


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
    if variant.correction == "icepop" and _band(cfg, "icepop")[0] <= 0:
        return f"tis.icepop: verl's IcePop threshold needs a positive lower bound, got {list(_band(cfg, 'icepop'))}"
    return None


def correction_overrides(cfg: ExperimentConfig, variant: VariantSpec) -> dict[str, object]:
    """verl's `algorithm.rollout_correction` keys for the variant's correction (module table)."""
    t, kind = cfg.tis, variant.correction
    level = {"none": None, "tis": t.level, "seq_tis": "sequence", "mis": "token", "icepop": "token"}[kind]
    threshold: object = t.cap
    if kind == "icepop":
        lo, hi = _band(cfg, "icepop")
        threshold = f"{lo!r}_{hi!r}"
    out: dict[str, object] = {f"{RC}.rollout_is": level, f"{RC}.rollout_is_threshold": threshold}
    if kind == "mis":
        lo, hi = _band(cfg, "mis")
        out[f"{RC}.rollout_rs"] = "seq_mean_k1"
        out[f"{RC}.rollout_rs_threshold"] = f"{1.0 / hi!r}_{1.0 / lo!r}"
    return out


def precision_overrides(variant: VariantSpec) -> dict[str, object]:
    """The fp16 arm: FP16 Megatron training (with its dynamic loss scaling) and FP16 vLLM rollout."""
    if not variant.fp16:
        return {}
    return {
        "actor_rollout_ref.actor.megatron.dtype": "float16",
        "actor_rollout_ref.ref.megatron.dtype": "float16",
        "actor_rollout_ref.rollout.dtype": "float16",
    }
