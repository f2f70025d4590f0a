"""The quoted blocks of the longform testbed's step, change by change (fp8rl.quotes.files), from the
published benchmark records (fp8rl.quotes.registry.RECORDS):

- `benchmarks/step_ab.py --json`: a run's step with and without a change, per phase (the sampler's KV
  cache and the compiled fake quantization behind environment switches; the sampler's draw behind a
  config key);
- `benchmarks/calib_cadence.py --json`: a calibrated run's step at every update and at a cadence;
- `benchmarks/sampler_draw.py --json`: the two token draws alone and in `generate`, over a grid;
- `benchmarks/testbed_profile.py --json`: the step's time per category of op, and the bound it sets.

Each against the testbed's target: its step at least 2x faster than before the speed work.
"""

from __future__ import annotations

from pathlib import Path

from fp8rl.quotes.benchmarks import measured_on, met
from fp8rl.quotes.registry import measured_at, quoted_block, record
from fp8rl.report.formats import markdown_table, num

STEP_TARGET = 2.0  # the realistic testbed's step against the code before the speed work


@quoted_block("performance-step-ab", record_name="step_ab_longform")
@quoted_block("performance-fp8-compile", record_name="step_ab_fp8_compile_longform")
def performance_step_ab(published: Path, record_name: str) -> str:
    """A table and a paragraph: the longform testbed's step without and with a change behind an
    environment switch (the record `record_name` of `benchmarks/step_ab.py --json`: transformers' growing KV
    cache against the reserved one; the eager fake quantization against the `torch.compile`d kernel), per
    phase, with the bit-for-bit check and the 2x target."""
    r = record(published, record_name)
    phases = list(r["arms"]["after"]["phase_s"])
    rows = [
        [f"{arm} (`{r['switch']}={r[arm]}`)", num(a["step_s"], 3), *(num(a["phase_s"][p], 3) for p in phases)]
        for arm, a in ((arm, r["arms"][arm]) for arm in ("before", "after"))
    ]
    rows.append(
        ["before / after", f"{num(r['ratios']['step'])}×", *(f"{num(r['ratios'][p])}×" for p in phases)]
    )
    return (
        markdown_table(["arm", "step (s)", *(f"{p} (s)" for p in phases)], rows)
        + f"\n\n`{r['run']}` of `{r['config']}`, seconds per step (phases per step). The metrics of the two "
        f"arms are {'the same bit for bit' if r['metrics_same'] else 'NOT the same'} (timing keys aside). "
        f"Target: the testbed's step ≥ {num(STEP_TARGET, 1)}× faster than before the speed work: "
        f"{met(r['ratios']['step'] >= STEP_TARGET)} by this change alone. " + measured_on(r)
    )


@quoted_block("performance-calib-cadence")
def performance_calib_cadence(published: Path) -> str:
    """A table and a paragraph: a calibrated run's step with its bounds recomputed at every update and at
    the paper's cadence (`benchmarks/calib_cadence.py --json`), per phase, the shadow's share of the step
    and what the cadence saves of it."""
    r = record(published, "calib_cadence_longform")
    every, cadence = r["arms"]["per_update"], r["arms"]["cadence"]
    phases = ["rollout", "logprob", "train", "calib"]
    rows = [
        [f"{name}: `{r['runs'][arm]}`", num(a["step_s"], 3), *(num(a["phase_s"][p], 3) for p in phases)]
        for name, arm, a in (("every update", "per_update", every), ("cadence", "cadence", cadence))
    ]
    rows.append(["every update / cadence", f"{num(r['ratios']['step'])}×",
                 *(f"{num(every['phase_s'][p] / cadence['phase_s'][p])}×" for p in phases)])  # fmt: skip
    saved = (every["phase_s"]["calib"] - cadence["phase_s"]["calib"]) / every["step_s"]
    return (
        markdown_table(["arm", "step (s)", *(f"{p} (s)" for p in phases)], rows)
        + f"\n\n`{r['config']}`, seconds per step over {r['steps']} steps per run (phases per step; noise "
        f"scale fixed at {num(r['noise_scale'], 1)}, no target-KL search). The BF16 shadow's passes (`calib`) "
        f"are {num(100 * r['calib_share'], 1)} % of the step calibrated at every update; the cadence saves "
        f"{num(100 * saved, 1)} % of that step. Once their bounds differ the two arms sample other "
        "responses, of other lengths, so their rollout and update phases differ too, by more than the "
        "shadow's passes account for: the step's ratio is not the cadence's saving, the `calib` phase is. "
        + measured_on(r)
    )


@quoted_block("performance-sampler-draw")
def performance_sampler_draw(published: Path) -> str:
    """A table and two paragraphs: the two token draws alone and in `generate` over the grid of
    `benchmarks/sampler_draw.py --json`, then the testbed's step with each (`benchmarks/step_ab.py
    --config-switch schedule.sampler_draw --json`), against the 2x target."""
    grid, step = record(published, "sampler_draw"), record(published, "step_ab_sampler_draw_longform")
    rows = [
        [str(s["vocab"]), str(s["new_tokens"]), str(s["threads"]),
         *(num(s["draw_us"][d], 0) for d in ("multinomial", "inverse_cdf")), f"{num(s['draw_ratio'], 1)}×",
         *(num(s["generate_s"][d], 3) for d in ("multinomial", "inverse_cdf")), f"{num(s['generate_ratio'])}×"]
        for s in grid["shapes"]
    ]  # fmt: skip
    header = ["V", "T", "threads", "draw: multinomial (µs)", "draw: inverse CDF (µs)", "ratio",
              "generate: multinomial (s)", "generate: inverse CDF (s)", "ratio"]  # fmt: skip
    before, after = step["arms"]["before"], step["arms"]["after"]
    same = "the same" if step["metrics_same"] else "not the same (other tokens for the seed, as expected)"
    return (
        markdown_table(header, rows)
        + f"\n\nV vocabulary, T new tokens, every row running to T; {grid['rows']} rows; the draw alone on "
        f"one step's [{grid['rows']}, V] probabilities. Each draw gave the same tokens on every repeat: "
        f"{'yes' if grid['same_tokens_every_repeat'] else 'NO'}. Measured at {measured_at(grid, 'both')}; "
        f"median of {grid['repeats']} interleaved repeats.\n\n"
        f"On the testbed's step (`{step['run']}` of `{step['config']}`, {step['steps']} steps per run): "
        f"{num(before['step_s'], 3)} s with `multinomial`, {num(after['step_s'], 3)} s with `inverse_cdf` "
        f"({num(step['ratios']['step'])}×); the rollout's tokens per second "
        f"{num(before['rollout_tokens_per_s'], 0)} and {num(after['rollout_tokens_per_s'], 0)} "
        f"({num(step['ratios']['rollout_tokens_per_s'])}×). The two arms' metrics are {same}: their "
        "responses, and so their lengths, differ, so the step's ratio mixes the draw with the length of what "
        "was drawn; the rollout's tokens per second does not. Target: the testbed's step ≥ "
        f"{num(STEP_TARGET, 1)}× faster than before the speed work: {met(step['ratios']['step'] >= STEP_TARGET)} "
        "by this change alone. " + measured_on(step)
    )


@quoted_block("performance-testbed-profile")
def performance_testbed_profile(published: Path) -> str:
    """A table and a paragraph: where the testbed's step goes per category of op, and Amdahl's bound on
    what faster kernels for each could give (`benchmarks/testbed_profile.py --json`), against the 2x
    target."""
    r = record(published, "testbed_profile_longform")
    cats = ["gemm", "attn", "draw", "other"]
    rows = [
        [f"`{run}`", num(p["wall_s"], 3),
         *(f"{num(p['self_s'][c], 3)} ({num(100 * p['self_s'][c] / p['wall_s'], 0)} %)" for c in cats),
         *(f"{num(p['bound'][k])}×" for k in ("gemm", "gemm+attn+draw"))]
        for run, p in r["runs"].items()
    ]  # fmt: skip
    header = ["run", "step (s)", *(f"{c} (s)" for c in cats), "bound: gemm", "bound: gemm + attn + draw"]
    combined = {run: p["bound"]["gemm+attn+draw"] for run, p in r["runs"].items()}
    short = [f"`{run}`" for run, b in combined.items() if b < STEP_TARGET]
    within = [f"`{run}`" for run, b in combined.items() if b >= STEP_TARGET]
    reach = "; ".join(
        [f"out of reach by faster kernels for them alone for {', '.join(short)}"] * bool(short)
        + [f"reachable that way for {', '.join(within)} only if they became nearly free"] * bool(within)
    )
    return (
        markdown_table(header, rows)
        + f"\n\n`{r['config']}`, seconds per profiled step (noise scale fixed at {num(r['noise_scale'], 1)}, "
        f"no target-KL search; {r['numerics']} mode). A bound is the step's wall time over what is left "
        "of it if that category took no time at all. Even with every matrix product, every attention and "
        "the draw taking no time, the step would be at most "
        + ", ".join(f"{num(b)}× faster for `{run}`" for run, b in combined.items())
        + f": the ≥ {num(STEP_TARGET, 1)}× target is {reach}; "
        "the rest (`other`, and the interpreter's time outside any op) is the many small elementwise ops "
        f"of the emulation and of the model. Measured at {measured_at(r, 'both')}; {r['steps']} profiled "
        "steps after one warm-up step per run, under torch's profiler (which inflates small ops most)."
    )
