"""What the verl backend can run of a config, checked before any job starts.

What verl cannot run is refused here, in one place, with an `AdapterError` naming the config key:
`check_verl_support` per run (what `fp8rl verl train` checks), `verl_problems` over the whole matrix (a
`load_config(checks=...)` check, run by `fp8rl config validate` and the Snakefile's validation, so the
refusal comes before any job starts): `rowwise` (Megatron has no per-row recipe), `fp8.format: e5m2` on
a tensor-scaled recipe (Megatron takes e4m3 or hybrid), `fp8.noise_scale` other than 1 (the reference
trainer's emulation only), `calib.reference: shadow` (verl's actor exposes no unquantized re-scoring
pass to the loss; use `run`), the reference trainer's own schedule keys (`schedule.sampler_draw` other
than `multinomial`, `schedule.keep_every`), a correction verl cannot run (`matrix.variants`: score
centering, whose top-k inputs verl 0.9.1 neither collects nor hands a loss;
fp8rl.adapters.verl_corrections), and a model without a size or GPUs.
"""

from __future__ import annotations

import re

from fp8rl.adapters.verl_corrections import check_corrections
from fp8rl.adapters.verl_fp8 import fp8_transformer_overrides
from fp8rl.adapters.verl_model import AdapterError, parallelism
from fp8rl.adapters.verl_sizing import sizing_problems
from fp8rl.config import ExperimentConfig, ResolvedRun, RunSpec, resolve_run


def _condition_key(cfg: ExperimentConfig, condition: str | None, key: tuple | None) -> tuple | None:
    """`key` (a path under `fp8` or `calib`) as the path of the condition's own override when it sets
    that key."""
    if key is None or key[0] not in ("fp8", "calib") or condition is None:
        return key
    for i, c in enumerate(cfg.matrix.conditions):
        if c.name == condition and key[1] in getattr(c, key[0]):
            return ("matrix", "conditions", i, key[0], *key[1:])
    return key


def _run_problems(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun) -> list[AdapterError]:
    """Every refusal of one run (see the module docstring), its FP8 settings read from its condition."""
    run = resolve_run(cfg, spec)
    spec, fp8 = run.spec, run.fp8
    where = f" (condition {spec.condition!r})" if spec.condition else ""
    out = []
    if spec.spec.fp8 and fp8.noise_scale != 1.0:
        out.append(AdapterError(
            f"fp8.noise_scale: the noise dose{where} scales the reference trainer's emulated FP8 "
            "quantization error; the verl backend cannot run it",
            key=_condition_key(cfg, spec.condition, ("fp8", "noise_scale")),
        ))  # fmt: skip
    if spec.spec.fp8 and fp8.gemms:
        try:
            fp8_transformer_overrides(fp8, spec.granularity)
        except AdapterError as exc:
            out.append(AdapterError(str(exc), key=_condition_key(cfg, spec.condition, exc.key)))
    if spec.spec.calib and cfg.calib_for(spec.condition).reference.mode == "shadow":
        out.append(AdapterError(
            "calib.reference: 'shadow' needs an unquantized re-scoring pass inside the update, which "
            "verl's actor does not expose to a policy loss; with backend 'verl' use 'run' (targets from "
            "the matching bf16 run) or 'static:<q>'",
            key=_condition_key(cfg, spec.condition, ("calib", "reference")),
        ))  # fmt: skip
    if cfg.schedule.sampler_draw != "multinomial":
        out.append(AdapterError(
            f"schedule.sampler_draw: {cfg.schedule.sampler_draw!r} is the reference trainer's draw; verl's "
            "rollout draws its tokens in vLLM's sampler, which this key cannot set (leave it at "
            "'multinomial' with backend 'verl')",
            key=("schedule", "sampler_draw"),
        ))  # fmt: skip
    if cfg.schedule.keep_every is not None:
        out.append(AdapterError(
            "schedule.keep_every: the checkpoint history (`checkpoints/step{N}/`, the held-out curve's "
            "input) is the reference trainer's; verl keeps its own sharded checkpoints (trainer.save_freq), "
            "which fp8rl does not convert (leave it unset with backend 'verl')",
            key=("schedule", "keep_every"),
        ))  # fmt: skip
    refused = check_corrections(cfg, spec.spec)
    if refused:
        out.append(refused)
    try:
        parallelism(cfg.model(spec.model))  # its messages start with the key (models.NAME.params: ...)
    except AdapterError as exc:
        out.append(exc)
    return out


def check_verl_support(cfg: ExperimentConfig, spec: RunSpec | ResolvedRun) -> None:
    """Raise the first AdapterError of what the verl backend cannot run of this run (module docstring)."""
    problems = _run_problems(cfg, spec)
    if problems:
        raise problems[0]


def verl_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """Everything the verl backend would refuse of the config's matrix, as `(key path, message)` pairs
    for `load_config(checks=...)` (each problem once, with the first run that has it); [] for the
    reference backend. The one list of the backend's capability checks: `fp8rl config validate`, the
    Snakefile's validation and `fp8rl verl train` (check_verl_support) all run it."""
    if cfg.backend != "verl":
        return []
    out: dict[tuple, str] = {}
    for spec in cfg.runs():
        for exc in _run_problems(cfg, spec):
            msg, key = str(exc), exc.key or ()
            if key:  # validate_config reports the key path; drop the message's own copy
                msg = re.sub(r"^[A-Za-z0-9_.-]+: ", "", msg)
            out.setdefault(key or (msg.split(":", 1)[0],), f"{msg} (first refused run: {spec.run_id})")
    return [(key if len(key) > 1 else (), msg) for key, msg in out.items()] + sizing_problems(cfg)
