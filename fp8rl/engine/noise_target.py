"""Noise set by its effect: the noise scale whose trainer-vs-rollout mismatch is a target KL.

Two knobs are searched this way. `fp8.noise_scale` s makes every quantized operand `x + s·(Q(x) − x)`;
a `bf16_floor` run's `floor.scale` s moves each GEMM output of its bf16 rollout copy by s × a draw of its
bf16 ulp (fp8rl.fp8.kernel_floor). The effect of either on the mismatch depends on the model, the recipe
and the task, so a scale says little about where a run sits beside real stacks (docs/mismatch.md). A
run that names `fp8: {target_kl: K}` (an FP8 run) or `floor: {target_kl: K}` (a `bf16_floor` run, K a
healthy real BF16 stack's KL by default) gets, before its first step, the scale whose per-token KL (k3)
between the trainer and the rollout engine is K, measured the way the trainer measures it every step:
the run's own precision setup (policy and rollout copy at scale s) on its base model, `group_size`
samples of each of the first `PROMPTS` prompts of `test.jsonl` (never trained on) at the training
temperature from a fixed generator (the same random stream for every candidate scale), scored by the
trainer.

The search works in log-log space, where the KL grows about as s² for small errors: from s = 1 it steps
to `s·sqrt(K / KL(s))` until the target is bracketed, then interpolates between the bracket's ends,
keeping the bracket; it stops when a measured KL is within `TOLERANCE` (relative) of K, after
`MAX_STEPS` measurements (keeping the closest), or refuses (ValueError naming the key) a target outside
what `[MIN_NOISE_SCALE, MAX_NOISE_SCALE]` reaches. The result (`NoiseSearch`: the scale, its four
mismatch units, every candidate tried) is written to the run's `noise.json` and `summary.json` and held
fixed for the run; a resumed run reads it back instead of searching again when its train digest and
target match.

The runs of one base, setting and precision search alike (plain FP8 and FP8 + TIS, or every correction
of a comparison, differ only after the search), so a run in the DAG's layout (`{tier}/runs/{run id}`)
shares its search through `{tier}/noise/{key}.json` (`shared_key`: the train digest, target, granularity,
the variant's precision, the base's files, the held-out prompts and the thread count): the first run
searches while holding `{key}.lock`, the others wait for it and read its result. A run that reads a
shared search trains the same bits as one that searched itself (the search draws from its own generator,
as a resumed run, which reads its noise.json, already shows).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from fp8rl import numerics
from fp8rl.config import MAX_NOISE_SCALE, MIN_NOISE_SCALE, ExperimentConfig, ResolvedRun
from fp8rl.engine.data import load_split
from fp8rl.engine.precision import setup_precision
from fp8rl.engine.sampler import generate
from fp8rl.engine.scoring import score
from fp8rl.engine.tokenizer import encode_prompt
from fp8rl.io import atomic_write_json, sha256_file
from fp8rl.locks import LockNotAFile, LockUnsupported, RunDirLocked, hold_lock
from fp8rl.rl.mismatch import ROLLOUT, mismatch_units
from fp8rl.run_files import NOISE_FILE, RUNS_DIR, base_fingerprint

PROMPTS = 128  # held-out prompts (of test.jsonl), each sampled group_size times
SEED = 20_260_001  # the sampling generator's seed: the same stream for every candidate scale
TOLERANCE = 0.1  # stop when |KL - target| <= 10 % of the target
MAX_STEPS = 12
TINY_KL = 1e-30
SHARED_DIR = "noise"  # {tier}/noise/{key}.json: searches shared by the runs that search alike
WAIT_S = 5.0  # how often a run waiting for a shared search looks again


@dataclass
class NoiseSearch:
    """A finished search: the scale the run trains at and what it measured there."""

    target_kl: float
    noise_scale: float
    units: dict[str, float]  # mismatch/{kl_k3,abs_dlogp,tmpe,dlogp} at that scale
    tried: list[dict] = field(default_factory=list)  # every candidate: {"scale", "kl_k3"}
    prompts: int = 0
    samples: int = 0
    train_digest: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def measure(cfg: ExperimentConfig, run: ResolvedRun, base_policy, tokenizer, rows: list[dict]) -> dict:
    """The four mismatch units, trainer vs rollout, of `run` (at its noise scale) on `rows`, from a fresh
    copy of `base_policy` set up in the run's precision."""
    model = copy.deepcopy(base_policy)
    prec = setup_precision(model, cfg, run)
    prec.refresh_rollout()
    k = run.algo.group_size
    prompts = [encode_prompt(tokenizer, r["prompt"]) for r in rows for _ in range(k)]
    sch = cfg.schedule
    with torch.no_grad():
        batch = generate(
            prec.rollout, prompts, max_new_tokens=sch.max_new_tokens, eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id, temperature=sch.temperature, top_p=sch.top_p,
            generator=torch.Generator().manual_seed(SEED), draw=sch.sampler_draw,
        )  # fmt: skip
        lp, _ = score(prec.policy, batch, temperature=sch.temperature, packed=sch.remove_padding)
    return mismatch_units(lp, batch.log_probs, batch.response_mask, ROLLOUT)


def _next_scale(s: float, kl: float, target: float, lo: tuple | None, hi: tuple | None) -> float:
    """The next candidate: log-log interpolation inside a bracket (lo below the target, hi above), a
    KL ∝ s² step outside one (at most ×8 per step), kept inside the scale's range."""
    if lo is not None and hi is not None:
        (s0, k0), (s1, k1) = lo, hi
        slope = (math.log(k1) - math.log(k0)) / (math.log(s1) - math.log(s0))
        t = math.log(s0) + (math.log(target) - math.log(k0)) / slope if slope > 0 else math.nan
        inside = math.isfinite(t) and math.log(s0) < t < math.log(s1)
        nxt = math.exp(t) if inside else math.sqrt(s0 * s1)
    else:
        nxt = s * min(8.0, max(1 / 8, math.sqrt(target / max(kl, TINY_KL))))
    return min(MAX_NOISE_SCALE, max(MIN_NOISE_SCALE, nxt))


def find_noise_scale(
    cfg: ExperimentConfig, run: ResolvedRun, base_policy, tokenizer, data_dir: str | Path
) -> NoiseSearch:
    """Search the scale whose trainer-vs-rollout KL is `run.target_kl` (module docstring)."""
    target = run.target_kl
    key = "floor.target_kl" if run.floor is not None else "fp8.target_kl"
    knob = "kernel floor scale" if run.floor is not None else "noise scale"
    if target is None:
        raise ValueError(f"{run.run_id}: no fp8.target_kl or floor.target_kl to search a scale for")
    rows = load_split(data_dir, "test.jsonl")[:PROMPTS]
    tried: list[dict] = []
    lo = hi = None
    s = 1.0
    for _ in range(MAX_STEPS):
        units = measure(cfg, run.with_noise_scale(s), base_policy, tokenizer, rows)
        kl = max(units[f"{ROLLOUT}/kl_k3"], TINY_KL)  # an exact 0 (no mismatch at all) has no log
        tried.append({"scale": s, "kl_k3": kl, "units": units})
        if abs(kl - target) <= TOLERANCE * target:
            break
        if kl < target:
            lo = (s, kl) if lo is None or s > lo[0] else lo
            if s >= MAX_NOISE_SCALE:
                raise ValueError(
                    f"{run.run_id}: {key} {target:g} is out of reach: {knob} {MAX_NOISE_SCALE:g} gives "
                    f"a trainer-vs-rollout KL of {kl:.3g} on this base"
                )
        else:
            hi = (s, kl) if hi is None or s < hi[0] else hi
            if s <= MIN_NOISE_SCALE:
                raise ValueError(
                    f"{run.run_id}: {key} {target:g} is below what this recipe reaches: {knob} "
                    f"{MIN_NOISE_SCALE:g} still gives a trainer-vs-rollout KL of {kl:.3g} on this base"
                )
        s = _next_scale(s, kl, target, lo, hi)
    best = min(tried, key=lambda t: abs(math.log(t["kl_k3"] / target)))
    return NoiseSearch(
        target_kl=target,
        noise_scale=best["scale"],
        units=best["units"],
        tried=[{"scale": t["scale"], "kl_k3": t["kl_k3"]} for t in tried],
        prompts=len(rows),
        samples=run.algo.group_size,
        train_digest=run.train_digest,
    )


def _read_search(path: Path, run: ResolvedRun) -> NoiseSearch | None:
    """The search in `path` when it was written for this train digest and target, else None."""
    try:
        found = json.loads(path.read_text())
        if found.get("train_digest") == run.train_digest and found.get("target_kl") == run.target_kl:
            return NoiseSearch(**found)
    except (OSError, ValueError, TypeError):
        pass
    return None


def shared_key(run: ResolvedRun, base_dir: Path, data_dir: Path, device: object = "cpu") -> str:
    """What a search's result depends on besides the config sections of the train digest: the target,
    the granularity and the variant's precision (FP8, FP16, a bf16 floor), every file of the base but its
    records, the held-out prompts, the search's own constants, and what the kernels' bits depend on (the
    thread count, the numerics mode, the device)."""
    parts = {
        "train_digest": run.train_digest, "target_kl": run.target_kl, "granularity": run.spec.granularity,
        "fp8": run.variant.fp8, "fp16": run.variant.fp16,
        "floor": None if run.floor is None else run.floor.model_dump(mode="json"),
        "base": base_fingerprint(base_dir),
        "test": sha256_file(data_dir / "test.jsonl"), "prompts": PROMPTS, "seed": SEED,
        "tolerance": TOLERANCE, "max_steps": MAX_STEPS, "threads": torch.get_num_threads(),
        "numerics": numerics.active_mode(), "device": str(device),
    }  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def shared_dir(run: ResolvedRun, run_dir: Path) -> Path | None:
    """`{tier}/noise` when `run_dir` is `{tier}/runs/{run id}` (the DAG's layout), else None."""
    parts = Path(run.run_id).parts
    tail = run_dir.parts[-len(parts) - 1 :]
    if tuple(tail) != (RUNS_DIR, *parts):
        return None
    return run_dir.parents[len(parts)] / SHARED_DIR


def load_or_find(
    cfg: ExperimentConfig,
    run: ResolvedRun,
    base_policy,
    tokenizer,
    data_dir: str | Path,
    run_dir: str | Path,
    base_dir: str | Path | None = None,
) -> NoiseSearch:
    """The run's `noise.json` when it was written for this train digest, else, for a run in the DAG's
    layout whose `base_dir` is given, the tier's shared search of its key (waiting while another run
    makes it; module docstring), else a new search (written by `write_noise` once the run has claimed
    its directory)."""
    own = _read_search(Path(run_dir) / NOISE_FILE, run)
    if own is not None:
        return own
    shared = shared_dir(run, Path(run_dir)) if base_dir is not None else None
    if shared is None:
        return find_noise_scale(cfg, run, base_policy, tokenizer, data_dir)
    key = shared_key(run, Path(base_dir), Path(data_dir), next(base_policy.parameters()).device)
    path, said = shared / f"{key}.json", False
    while True:
        found = _read_search(path, run)
        if found is not None:
            return found
        try:
            with hold_lock(shared / f"{key}.lock", "another run of the same base and setting is searching"):
                found = _read_search(path, run)  # written while this run waited for the lock
                if found is None:
                    found = find_noise_scale(cfg, run, base_policy, tokenizer, data_dir)
                    atomic_write_json(path, found.as_dict())
                return found
        except (LockUnsupported, LockNotAFile):  # no lock to wait on here: search alone
            return find_noise_scale(cfg, run, base_policy, tokenizer, data_dir)
        except RunDirLocked:
            if not said:
                print(f"[{run.run_id}] waiting for the noise search {path} another run is making",
                      file=sys.stderr, flush=True)  # fmt: skip
                said = True
            time.sleep(WAIT_S)


def write_noise(run_dir: str | Path, search: NoiseSearch) -> None:
    """`noise.json` in the run directory (atomic)."""
    atomic_write_json(Path(run_dir) / NOISE_FILE, search.as_dict())
