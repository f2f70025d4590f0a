"""`fp8rl train`: the reference GRPO/DAPO loop, the executable definition of every variant.

One optimizer step (`step` = 1..schedule.steps), as nanochat-style straight-line code:
1. rollout: the rollout copy (bf16-emulated, or FP8 per recipe) is refreshed from the policy and
   samples `group_size` responses per prompt (`collect.collect_rollouts`: rewards, DAPO shaping and
   dynamic sampling, GRPO advantages);
2. log-prob recompute: the trainer scores the same sequences in its own precision (`old_log_prob`),
   giving the real rollout/trainer mismatch (`mismatch/*` and the other frameworks' names for it), the
   entropy and the variant's mismatch correction (fp8rl.rl.corrections: TIS, sequence TIS, masked IS,
   IcePop: weights, and for masked IS the sequences dropped from the loss); for fp8 variants a BF16 shadow pass (quantization switched off) re-scores a random
   `calib.sample_frac` of the sequences (the calibration reference and the `phantom/low_neg` diagnostic);
3. `ppo_epochs` × `mini_batches` updates with `fp8rl.rl.policy_loss`; `*_calib` variants take the
   bounds of `Calibrator` (shadow ratios of the current policy vs the old one, or the bf16 run's
   per-step clip fractions with `calib.reference: run`, or a static target: fp8rl.engine.update_bounds);
   `fp16` scales the loss dynamically (fp8rl.engine.loss_scale);
4. one line of metrics (docs/architecture.md#metrics) in metrics.jsonl, sent live to the config's
   trackers (fp8rl.tracking: TensorBoard in `{run}/tb/` by default) and, without a progress bar, a
   heartbeat line on stderr (fp8rl.engine.heartbeat); a checkpoint every `checkpoint_every` steps,
   and one of the step just done when a stop was requested (SIGTERM: a Slurm time limit; the run then
   raises `Interrupted` without a summary, fp8rl.engine.stop); with `schedule.keep_every` N, the policy's
   weights every N steps in `checkpoints/step{N}/` too (the checkpoint history `fp8rl eval heldout` reads).
A metric that averages over updates (`clip/*`, `calib/*`, `phantom/*`, `loss/*`) is the mean over the
step's mini-batch updates; `ratio/*` are quantiles over all of them.

Every random draw of a step comes from generators seeded by (run seed, step, purpose), and the global
RNGs are checkpointed too, so a run killed at any point and restarted from its last checkpoint writes
the same metrics (except `time/*`) as one that never stopped. `StabilityMonitor` watches each step for
NaN/inf (and fp8rl.engine.divergence stops a step at a non-finite sampling distribution, log-prob, loss,
gradient norm or weight after an update), an entropy spike or collapse, gibberish and reward collapse: the run's status becomes
`diverged` (exit 0) at the first one, which summary.json keeps (`divergence`: kind, step, reason);
`stability.on_divergence: stop` ends the run there, `continue` trains on to the last step (a NaN/inf
in the update itself always stops it). An exception is `failed` (exit 1).
"""

from __future__ import annotations

import copy
import hashlib
import math
import sys
import time
import traceback
from pathlib import Path

import torch
from tqdm import tqdm

from fp8rl.config import ExperimentConfig, ResolvedRun, RunSpec, resolve_run
from fp8rl.engine import tasks
from fp8rl.engine.checkpoint import (
    has_checkpoint,
    keep_weights,
    resumable_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from fp8rl.engine.collect import collect_rollouts
from fp8rl.engine.data import load_split
from fp8rl.engine.device import resolve_device
from fp8rl.engine.divergence import Diverged, require_finite_weights
from fp8rl.engine.heartbeat import Heartbeat
from fp8rl.engine.inputs import check_base_seed
from fp8rl.engine.loss_scale import DynamicLossScaler
from fp8rl.engine.model import load_hf
from fp8rl.engine.noise_target import NoiseSearch, load_or_find, write_noise
from fp8rl.engine.phase_timer import PhaseTimer, throughput_report
from fp8rl.engine.precision import bf16_emulation, setup_precision
from fp8rl.engine.ratio_noise import RatioNoise
from fp8rl.engine.sampler import RolloutBatch, sampler_distributions
from fp8rl.engine.scoring import score
from fp8rl.engine.shadow import ShadowPass
from fp8rl.engine.stop import Interrupted, StopRequest
from fp8rl.engine.tokenizer import encode_prompts, load_tokenizer
from fp8rl.engine.update_batch import MiniBatch, StepMeans, StepScores
from fp8rl.engine.update_bounds import RunTargets, UpdateBounds
from fp8rl.fp8 import fp8_state_dict, load_fp8_state_dict
from fp8rl.provenance import provenance
from fp8rl.rl import (
    Calibrator,
    ClipBounds,
    LossTerms,
    StabilityMonitor,
    entropy_from_logits,
    masked_ratio,
    mismatch_kl,
    policy_loss,
    ratio_quantiles,
)
from fp8rl.rl.corrections import ICEPOP_BAND, MIS_BAND, get_correction, mismatch_aliases, rollout_correction
from fp8rl.rl.corrections.scorecenter import centering_loss
from fp8rl.rl.mismatch import ROLLOUT, mismatch_units
from fp8rl.run_files import RunDir
from fp8rl.run_records import PHASES, build_summary
from fp8rl.tracking import Trackers, check_trackers, open_trackers
from fp8rl.vocabulary import (
    ACC_MEAN,
    ADAPTIVE_ICEPOP_MASK_FRAC,
    GIBBERISH_RATE,
    MISMATCH_KL_K3,
    RESP_LEN_MEAN,
    REWARD_MEAN,
)

FINAL_KEYS = (REWARD_MEAN, ACC_MEAN, "entropy", RESP_LEN_MEAN, GIBBERISH_RATE, MISMATCH_KL_K3)


def step_seed(seed: int, step: int, purpose: str) -> int:
    return int(hashlib.sha256(f"{seed}:{step}:{purpose}".encode()).hexdigest()[:15], 16)


def _gen(seed: int, step: int, purpose: str) -> torch.Generator:
    return torch.Generator().manual_seed(step_seed(seed, step, purpose))


def _finite(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    if not bool(torch.isfinite(x[mask > 0]).all()):
        raise Diverged(f"non-finite {name}")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's learning rate (torchao's AdamWFp8 keeps it as a tensor, to be filled in place)."""
    for g in optimizer.param_groups:
        if isinstance(g["lr"], torch.Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


class Trainer:
    """One run of the matrix: `Trainer(cfg, run, ...).run()` returns the summary it wrote.

    Everything the run owns (model copies, precision, optimizer, calibrator, shadow pass, detectors,
    data) is built here, before any step; a bad input raises ValueError before work starts."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        run: RunSpec | ResolvedRun,
        *,
        base_dir: str | Path,
        data_dir: str | Path,
        out_dir: str | Path,
        run_targets: RunTargets | None = None,
        progress: bool = True,
        shadow_diagnostics: bool = True,
        device: str | None = None,
        stop: StopRequest | None = None,
    ):
        """`run_targets`: per-step calibration targets of the matching bf16 run (`calib.reference: run`).
        `shadow_diagnostics=False` limits the shadow pass to `*_calib` variants (the step-time benchmark);
        `device` None: CUDA when resources.train.gpus > 0 (fp8rl.engine.device); `stop`: checked after
        every step (`fp8rl train` sets it on SIGTERM)."""
        # the run's settings, resolved once (fp8rl.config.resolved): algorithm, FP8 under its condition, bounds
        self.resolved = resolve_run(cfg, run)
        self.cfg, self.run_spec, self.spec = cfg, self.resolved.spec, self.resolved.variant
        self.device = resolve_device(device, cfg.resources_for("train").gpus)
        self.algo = self.resolved.algo
        self.base_dir, self.data_dir = Path(base_dir), Path(data_dir)
        # which base the run starts from (summary.json's `base`); another seed's base is refused here
        self.base = check_base_seed(cfg, self.run_spec, self.base_dir)
        self.dir = RunDir(out_dir)
        self.progress = progress
        self.stop = stop if stop is not None else StopRequest()
        if self.resolved.needs_reference and run_targets is None:
            raise ValueError(
                f"{self.run_spec.run_id}: calib.reference is 'run' but no bf16 reference run was given"
            )
        check_trackers(cfg.tracking)

        torch.set_num_threads(cfg.resources_for("train").threads)
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.tokenizer = load_tokenizer(self.base_dir)
        policy = load_hf(self.base_dir).to(self.device)
        # `fp8.target_kl` / `floor.target_kl`: the noise (or kernel floor) scale that gives the target
        # mismatch at the base, found (or read back from noise.json) before anything else is built, then
        # held fixed (fp8rl.engine.noise_target)
        self.noise: NoiseSearch | None = None
        if self.resolved.target_kl is not None:
            self.noise = load_or_find(
                cfg, self.resolved, policy, self.tokenizer, self.data_dir, self.dir.root, self.base_dir
            )
            self.resolved = self.resolved.with_noise_scale(self.noise.noise_scale)
        # The KL penalty's anchor: the base policy, frozen and bf16-emulated (kl_coef > 0 only).
        self.kl_policy: torch.nn.Module | None = None
        if self.algo.kl_coef > 0:
            self.kl_policy = copy.deepcopy(policy).eval().requires_grad_(False)
            bf16_emulation(self.kl_policy)
        self.prec = setup_precision(policy, cfg, self.resolved)
        self.policy = self.prec.policy
        self.policy.train()
        self.scaler = DynamicLossScaler() if self.spec.fp16 else None
        self.timer = PhaseTimer(self.device)
        self.correction = get_correction(self.spec.correction)  # fp8rl.rl.corrections' registry
        self.calibrator = (
            Calibrator.from_config(
                self.resolved.calib, clip_low=self.algo.clip_low, clip_high=self.algo.clip_high
            )
            if self.spec.calib
            else None
        )
        # The BF16 shadow pass runs in every fp8 variant: calibration reference and phantom diagnostics.
        self.shadow: ShadowPass | None = None
        if self.spec.fp8 and (self.spec.calib or shadow_diagnostics or self.correction.needs_shadow):
            self.shadow = ShadowPass(
                self.policy,
                self.prec.as_bf16,
                self.timer,
                self.resolved.calib.sample_frac,
                cfg.schedule.temperature,
                packed=cfg.schedule.remove_padding,
            )
        self.bounds = UpdateBounds(
            self.resolved.bounds,
            calibrator=self.calibrator,
            shadow=self.shadow,
            reference=self.resolved.calib.reference.mode,
            run_targets=run_targets or {},
            updates_per_step=cfg.schedule.ppo_epochs * cfg.schedule.mini_batches,
            timer=self.timer,
            correction=self.correction,
        )
        self.loss_terms = LossTerms.from_algo(self.algo)  # checked once, here
        self.stability = StabilityMonitor.from_config(cfg.stability)
        # synthetic phantom clipping (fp8.ratio_noise, attribution tier); level 0 elsewhere
        self.ratio_noise = RatioNoise(self.resolved.ratio_noise)
        rows = load_split(self.data_dir, "train.jsonl")
        self.prompt_ids = encode_prompts(self.tokenizer, [r["prompt"] for r in rows])
        self.answers = [r["answer"] for r in rows]
        self.verifier = tasks.reward_fn(cfg.task.name)
        self.format_check = tasks.format_fn(cfg.task.name)

    # ------------------------------------------------------------------------------------- checkpoints

    def _trainer_state(self) -> dict:
        return {
            "policy": self.policy.state_dict(),
            "policy_fp8": fp8_state_dict(self.policy),
            "rollout_fp8": fp8_state_dict(self.prec.rollout),
            "optimizer": self.prec.optimizer.state_dict(),
            "calibrator": self.calibrator.state_dict() if self.calibrator else None,
            "ratio_hist": self.shadow.hist.state_dict() if self.shadow else None,
            "stability": self.stability.state_dict(),
            "loss_scaler": self.scaler.state_dict() if self.scaler else None,
        }

    def _restore(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        load_fp8_state_dict(self.policy, state["policy_fp8"])
        load_fp8_state_dict(self.prec.rollout, state["rollout_fp8"])
        self.prec.optimizer.load_state_dict(state["optimizer"])
        if self.calibrator is not None:
            self.calibrator.load_state_dict(state["calibrator"])
        self.stability.load_state_dict(state["stability"])
        if self.scaler is not None and state.get("loss_scaler") is not None:
            self.scaler.load_state_dict(state["loss_scaler"])
        if self.shadow is not None and state.get("ratio_hist") is not None:
            self.shadow.hist.load_state_dict(state["ratio_hist"])
        set_rng_state(state["rng"])

    def _save(self, step: int) -> None:
        meta = {
            "step": step,
            "metrics_offset": self.dir.metrics_size(),
            "run_id": self.run_spec.run_id,
            "config_digest": self.cfg.digest(),
            "train_digest": self.resolved.train_digest,
        }
        save_checkpoint(self.dir.checkpoint, self.policy, self.tokenizer, self._trainer_state(), meta)

    def _save_diverged(self, step: int) -> None:
        """Keep a loadable checkpoint for the evaluators: the current policy if its weights are finite,
        else the last periodic checkpoint (or none was written yet: the base model's weights)."""
        finite = all(bool(torch.isfinite(p).all()) for p in self.policy.parameters())
        if finite or not has_checkpoint(self.dir.checkpoint):
            if not finite:
                self.policy.load_state_dict(load_hf(self.base_dir).state_dict(), strict=False)
            self._save(step - 1)

    # --------------------------------------------------------------------------------------- the loop

    def _resume(self) -> int:
        """Restore the last checkpoint of this run if it is still valid; returns the last step done."""
        resume = resumable_checkpoint(
            self.dir.checkpoint, run_id=self.run_spec.run_id, train_digest=self.resolved.train_digest
        )
        if resume is None:
            self.dir.reset_metrics(0)
            self.dir.reset_samples(0)
            return 0
        meta, state = resume
        self._restore(state)
        self.dir.reset_metrics(int(meta["metrics_offset"]))
        self.dir.reset_samples(int(meta["step"]))
        return int(meta["step"])

    def run(self) -> dict:
        steps = self.cfg.schedule.steps
        last, status, reason = 0, "ok", None
        trackers = Trackers([])
        try:
            self.dir.write_config(self.cfg.model_dump(mode="json"))
            if self.noise is not None:
                write_noise(self.dir.root, self.noise)
            last = self._resume()
            if last:  # in the log of the job that resumed, e.g. after a Slurm time limit
                print(
                    f"[{self.run_spec.run_id}] resumed from its checkpoint at step {last}/{steps}",
                    file=sys.stderr,
                    flush=True,
                )
            if self.stability.divergence is not None:  # resumed after the first divergence
                status, reason = "diverged", self.stability.divergence.reason
            bar = tqdm(total=steps, initial=last, desc=self.run_spec.run_id, disable=not self.progress)
            beat = Heartbeat(self.run_spec.run_id, steps, start_step=last) if not self.progress else None
            trackers = open_trackers(
                self.cfg.tracking, self.dir.root, self.run_spec.run_id,
                tier_dir=Path(self.cfg.results_dir) / self.cfg.tier,
                config=self.cfg.model_dump(mode="json"), resume_step=last,
                train_digest=self.resolved.train_digest,
            )  # fmt: skip
            for step in range(last + 1, steps + 1):
                try:
                    metrics = self.train_step(step)
                except Diverged as exc:
                    first = self.stability.record_non_finite(step, str(exc))
                    status, reason, last = "diverged", first.reason, step
                    self._save_diverged(step)
                    break
                self.dir.append_metrics(metrics)
                trackers.log(metrics)
                last = step
                if beat is not None:
                    beat.update(step, metrics)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['reward/mean']:.3f}", ent=f"{metrics.get('entropy', float('nan')):.3f}"
                )
                if self.stability.update(step, metrics) is not None:
                    status, reason = "diverged", self.stability.divergence.reason
                    if self.cfg.stability.on_divergence == "stop":
                        self._save(step)
                        break
                keep = self.cfg.schedule.keep_every
                if keep is not None and step % keep == 0:  # the checkpoint history, before the resume point
                    meta = {
                        "step": step,
                        "run_id": self.run_spec.run_id,
                        "train_digest": self.resolved.train_digest,
                    }
                    keep_weights(self.dir.kept_checkpoint(step), self.policy, self.tokenizer, meta)
                if step % self.cfg.schedule.checkpoint_every == 0 or step == steps or self.stop.requested:
                    self._save(step)
                if self.stop.requested and step < steps:
                    raise Interrupted(step, self.stop.signum)
            bar.close()
        except Interrupted:
            raise  # no summary: the run is unfinished, and resumes from the checkpoint just written
        except Exception as exc:  # a crash: summary `failed`, exit non-zero
            status, reason = "failed", f"{exc.__class__.__name__}: {exc}"
            traceback.print_exc()
        finally:
            trackers.close()
        return self._finish(status, reason, last)

    def _finish(self, status: str, reason: str | None, last: int) -> dict:
        rows = self.dir.read_metrics() if self.dir.metrics.exists() else []
        final = {k: rows[-1][k] for k in FINAL_KEYS if rows and k in rows[-1]}
        summary = build_summary(
            self.run_spec.run_id,
            status,
            reason,
            last,
            self.cfg.schedule.steps,
            final,
            provenance(self.cfg.digest()),
            divergence=self.stability.divergence.as_dict() if self.stability.divergence else None,
            base=self.base,
            noise=self._noise_summary(),
        )
        self.dir.write_throughput(throughput_report(rows, self.prec))
        if self.shadow is not None:
            self.dir.write_ratio_hist(self.shadow.hist.as_dict())
        self.dir.write_summary(summary)
        return summary

    def _noise_summary(self) -> dict | None:
        """summary.json's `noise`: a `fp8.target_kl` (or `floor.target_kl`) run's target, the scale it
        trained at, the mismatch units its search measured there."""
        if self.noise is None:
            return None
        n = self.noise
        return {"target_kl": n.target_kl, "noise_scale": n.noise_scale, "units": n.units}

    # ------------------------------------------------------------------------------------- one step

    def train_step(self, step: int) -> dict:
        """One optimizer step, top to bottom: rollout -> score -> shadow -> (bounds -> update) per
        mini-batch; returns the step's line of metrics.jsonl."""
        seed, sch = self.run_spec.seed, self.cfg.schedule
        t_step = time.perf_counter()
        # 1. rollout: refresh the rollout copy from the policy, sample, reward, advantages
        with self.timer.phase("rollout") as ph:
            self.prec.refresh_rollout()
            ro = collect_rollouts(
                self.prec.rollout, self.tokenizer, self.prompt_ids, self.answers,
                algo=self.algo, schedule=sch, generator=_gen(seed, step, "rollout"), verifier=self.verifier,
                format_check=self.format_check, keep_distributions=self.correction.needs_distributions,
            )  # fmt: skip
            ph.tokens = ro.metrics["tok/rollout"]
        self.dir.append_samples(step, ro.samples)
        metrics: dict[str, float] = {"step": step, **ro.metrics}
        if ro.batch is not None:  # None: dynamic sampling kept no group this step
            batch = ro.batch
            # 2. score: the trainer's old log-probs, entropy, mismatch and its correction (TIS, ...)
            scores, score_metrics = self._score_step(batch)
            metrics.update(score_metrics)
            single_update = scores.reused_forward is not None
            # 3. shadow: the BF16 re-score of a sample of the sequences (fp8 variants)
            if self.shadow is not None:
                self.shadow.start_step(batch, _gen(seed, step, "shadow"), single_update=single_update)
                metrics.update(self.shadow.mismatch(scores.old_log_prob, batch.response_mask))
            # 4. ppo_epochs x mini_batches updates in a seeded order, each under its own clip bounds
            n = len(batch.response_mask)
            mb_size = math.ceil(n / sch.mini_batches)
            order_gen = _gen(seed, step, "minibatch")
            self.ratio_noise.start_step(seed, step)
            set_lr(self.prec.optimizer, self._lr(step))
            means, ratios, masks = StepMeans(), [], []
            for epoch in range(sch.ppo_epochs):
                order = torch.arange(n) if single_update else torch.randperm(n, generator=order_gen)
                for k, idx in enumerate(order.to(self.device).split(mb_size)):
                    mb = MiniBatch.select(batch, ro.advantages, scores, idx, first_update=epoch == k == 0)
                    lp, logits, ratio = self._forward(mb, scores.reused_forward)
                    bounds, bound_metrics = self.bounds.for_update(step, mb, ratio)
                    update_metrics = self._apply_update(lp, logits, mb, bounds)
                    means.add({**update_metrics, **bound_metrics})
                    ratios.append(ratio)
                    masks.append(mb.mask)
            update_means = means.means()
            update_means.pop("loss/tokens", None)
            metrics.update(update_means)
            metrics.update(ratio_quantiles(torch.cat(ratios), torch.cat(masks)))
        # 5. the step's time per phase (a phase that did not run this step is absent, never 0)
        for g in PHASES:
            got = self.timer.pop(g)
            if got is not None:
                metrics[f"time/{g}_s"], metrics[f"tok/{g}"] = got
        metrics["time/step_s"] = time.perf_counter() - t_step
        metrics["lr"] = self._lr(step)
        return metrics

    def _lr(self, step: int) -> float:
        sch = self.cfg.schedule
        return sch.lr * min(1.0, step / sch.warmup_steps) if sch.warmup_steps else sch.lr

    def _score(self, model: torch.nn.Module, batch: RolloutBatch, *, return_logits: bool = False):
        """`score` at the run's temperature, on its token layout (padded, or real tokens only)."""
        sch = self.cfg.schedule
        return score(
            model, batch, temperature=sch.temperature, return_logits=return_logits, packed=sch.remove_padding
        )

    def _score_step(self, batch: RolloutBatch) -> tuple[StepScores, dict[str, float]]:
        """The trainer's scoring of the step's batch, shared by its updates: old log-probs (with a single
        update per step, the update's own forward, detached, as TRL and verl do), entropy, the KL
        policy's log-probs, the rollout/trainer mismatch and the variant's correction."""
        sch, mask = self.cfg.schedule, batch.response_mask
        out: dict[str, float] = {}
        reused = None
        if sch.ppo_epochs * sch.mini_batches == 1:
            with self.timer.phase("train") as ph:
                lp, logits = self._score(self.policy, batch, return_logits=True)
                ph.tokens = float(batch.attention_mask.sum())
            reused, old_lp = (lp, logits), lp.detach()
        else:
            with self.timer.phase("logprob") as ph, torch.no_grad():
                old_lp, logits = self._score(self.policy, batch, return_logits=True)
                ph.tokens = float(batch.attention_mask.sum())
        _finite("trainer log-probs", old_lp, mask)
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach(), mask)
            out["entropy"] = float((ent * mask).sum() / mask.sum().clamp(min=1))
            kl_ref_lp = None
            if self.kl_policy is not None:
                kl_ref_lp, _ = self._score(self.kl_policy, batch)
        out.update(mismatch_kl(old_lp, batch.log_probs, mask))
        out.update(mismatch_units(old_lp, batch.log_probs, mask, ROLLOUT))
        out.update(mismatch_aliases(old_lp, batch.log_probs, mask))
        t = self.resolved.tis
        dists = sampler_distributions(batch, logits) if self.correction.needs_distributions else {}
        corr = rollout_correction(
            self.spec.correction, old_lp, batch.log_probs, mask, cap=t.cap, level=t.level,
            icepop=t.icepop or ICEPOP_BAND, mis=t.mis or MIS_BAND,
            icepop_mask_frac=ADAPTIVE_ICEPOP_MASK_FRAC if t.icepop_mask_frac is None else t.icepop_mask_frac, **dists,
        )  # fmt: skip
        out.update(corr.metrics)
        return StepScores(old_lp, corr.weights, kl_ref_lp, reused, corr.keep, corr.centering), out

    def _forward(
        self, mb: MiniBatch, reused_forward
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The mini-batch's log-probs under the current policy (with grad; the step's own forward when
        it has a single update), its logits when the entropy bonus needs them, and its detached ratios
        to the old log-probs (after any synthetic ratio noise, fp8rl.engine.ratio_noise)."""
        with self.timer.phase("train") as ph:
            if reused_forward is not None:
                lp, logits = reused_forward
            else:
                want_logits = self.algo.entropy_coef > 0 or mb.centering is not None
                lp, logits = self._score(self.policy, mb.batch, return_logits=want_logits)
                ph.tokens = float(mb.batch.attention_mask.sum())
            _finite("log-probs in the update", lp.detach(), mb.mask)
            lp = self.ratio_noise.apply(lp, mb.old_log_prob)
            ratio = masked_ratio(lp.detach(), mb.old_log_prob, mb.mask)
        return lp, logits, ratio

    def _apply_update(self, lp, logits, mb: MiniBatch, bounds: ClipBounds) -> dict[str, float]:
        """The policy loss under `bounds`, backward, gradient clipping and one optimizer step (with the
        fp16 loss scaler, an overflowed step is skipped); returns the loss's metrics and `grad_norm`.
        The log-probs were checked finite by `_forward`; a non-finite loss, gradient norm or weight is a
        divergence."""
        sch, algo = self.cfg.schedule, self.algo
        with self.timer.phase("train"):
            entropy = entropy_from_logits(logits, mb.mask) if algo.entropy_coef > 0 else None
            loss, lm = policy_loss(
                lp, mb.old_log_prob, mb.advantages, mb.mask, bounds, self.loss_terms,
                is_weights=mb.is_weights, ref_log_prob=mb.kl_ref_log_prob, entropy=entropy, check_values=False,
            )  # fmt: skip
            if mb.centering is not None:  # score centering's additive term (fp8rl.rl.corrections)
                loss = loss + centering_loss(
                    logits, mb.centering, mb.advantages, mb.mask, self.loss_terms.loss_agg_mode
                )
            if not bool(torch.isfinite(loss)):
                raise Diverged("non-finite loss")
            if self.scaler is not None:  # fp16: an overflowed step is skipped, not a divergence
                params = [p for p in self.policy.parameters() if p.requires_grad]
                gnorm, sm = self.scaler.backward_step(loss, params, self.prec.optimizer, sch.grad_clip)
                lm.update(sm)
            else:
                self.prec.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                gnorm = float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), sch.grad_clip))
                if not math.isfinite(gnorm):
                    raise Diverged("non-finite gradient norm")
                self.prec.optimizer.step()
        require_finite_weights(self.policy, "after the optimizer step")
        if math.isfinite(gnorm):
            lm["grad_norm"] = gnorm
        return lm
