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
FP16. What verl cannot express is refused by `check_corrections`, with the config key to change: an
IcePop band starting at 0 (`tis.icepop`: verl needs a positive lower bound), and score centering
(`matrix.variants`: `NOT_ON_VERL`), whose inputs verl 0.9.1 neither collects nor hands a loss.

Score centering on a real engine reads the sampler's top k, as arXiv 2609.20807's top-k estimator and
NeMo-RL's `loss_fn.score_centering` do: at each generated position the rollout engine returns the ids H
and log-probs of its k most likely next tokens (vLLM `SamplingParams(logprobs=k)`, after the
temperature and the top-k/top-p cut under verl's `logprobs_mode: processed_logprobs`), the trainer
computes pi_theta at those ids over the full vocabulary with their gradient, and the term is
`A_t sum_{v in H} sg(c_v) log pi_theta(v)` (fp8rl.rl.corrections.scorecenter has the full-vocabulary
form; `tis_scorecenter` also needs pi_old at H). verl 0.9.1 carries none of the three:

- the rollout: `vLLMHttpServer.generate` (verl/workers/rollout/vllm_rollout/vllm_async_server.py)
  turns the agent loop's `logprobs` flag (`rollout.calculate_log_probs`) into `logprobs=0`, whatever a
  request asks for, and keeps the sampled token's log-prob only (`TokenOutput.log_probs`, one float per
  token, the batch's `rollout_log_probs` [B, T]);
- the batch: the only per-position top-k tensors it carries are `teacher_ids` / `teacher_logprobs`,
  filled by the teacher loop (`AgentLoopWorker._compute_teacher_logprobs`) from a separate, frozen
  teacher model's prefill of the finished sequence, and only with `distillation.enabled`;
- the trainer: the actor's forward returns the sampled tokens' log-probs
  (`MegatronEngineWithLMHead._lm_head_logits_processor`:
  `vocab_parallel_log_probs_from_logits(logits, label)`),
  and `ppo_loss` (verl/workers/utils/losses.py) hands a registered policy loss `old_log_prob`,
  `log_prob`, `advantages`, `response_mask` and `rollout_is_weights` only. Other ids' log-probs with a
  gradient exist only in that processor's distillation branch (`distillation_use_topk`:
  `compute_forward_kl_topk` over the teacher's ids), set only when a teacher model runs.

So a verl Score Centering needs verl's functions replaced, not a loss registered (docs/paper_deviations.md
says what a patch would change); it runs in the reference trainer.

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

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.config import ExperimentConfig
from fp8rl.vocabulary import ADAPTIVE_ICEPOP_MASK_FRAC, ICEPOP_BAND, MIS_BAND, VariantSpec

RC = "algorithm.rollout_correction"

# correction -> what it needs that verl 0.9.1 lacks (module docstring)
_SC = (
    "the rollout engine's top-k next-token ids and log-probs at every generated position and the "
    "trainer's log-probs of those ids with their gradient"
)
NOT_ON_VERL = {"scorecenter": _SC, "tis_scorecenter": _SC + ", and pi_old at those ids"}
_VERL_LACKS = (
    "verl 0.9.1 asks vLLM for the sampled token's log-prob only and keeps that one "
    "(vLLMHttpServer.generate), and its actor computes the sampled tokens' log-probs only, the only "
    "log-probs a policy loss gets (MegatronEngineWithLMHead._lm_head_logits_processor, "
    "verl.workers.utils.losses.ppo_loss)"
)

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


def _variant_key(cfg: ExperimentConfig, name: str) -> tuple:
    """The config path that names the variant: its entry in `matrix.variants`."""
    variants = list(cfg.matrix.variants)
    return ("matrix", "variants", variants.index(name)) if name in variants else ("matrix", "variants")


def check_corrections(cfg: ExperimentConfig, variant: VariantSpec) -> AdapterError | None:
    """Why verl cannot run this variant's correction, as an `AdapterError` whose message starts with the
    config key to change and whose `key` is its path (the variant's `matrix.variants` entry, or
    `tis.icepop`), or None."""
    kind, name = variant.correction, variant.name
    if kind in NOT_ON_VERL:
        return AdapterError(
            f"matrix.variants: {name}: correction {kind!r} cannot run on backend 'verl': it needs "
            f"{NOT_ON_VERL[kind]}; {_VERL_LACKS}. Run it with backend 'reference', or leave it out of the "
            "verl matrix (docs/paper_deviations.md: score centering stays reference-only)",
            key=_variant_key(cfg, name),
        )
    if kind not in ROLLOUT_IS:
        return AdapterError(
            f"matrix.variants: {name}: correction {kind!r} has no verl mapping (fp8rl.adapters."
            "verl_corrections ROLLOUT_IS); it runs in the reference trainer (backend: reference)",
            key=_variant_key(cfg, name),
        )
    if variant.calib and kind in CORRECTION_LOSSES:
        return AdapterError(
            f"matrix.variants: {name}: calibrated clipping and {kind!r} are two verl policy losses "
            f"(calibrated_clip, {CORRECTION_LOSSES[kind]}); verl runs one",
            key=_variant_key(cfg, name),
        )
    if kind == "icepop" and _band(cfg, "icepop")[0] <= 0:
        return AdapterError(
            f"tis.icepop: verl's IcePop threshold needs a positive lower bound, got {list(_band(cfg, 'icepop'))}",
            key=("tis", "icepop"),
        )
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
