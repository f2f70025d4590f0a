"""fp8rl's reference trainer vs TRL's `GRPOTrainer` on the same tiny model and job, over a grid of shapes.

Job (both trainers): a randomly initialised Llama with the smoke tier's char tokenizer, GRPO, 16 prompts x
8 samples, temperature 1, one PPO epoch with one optimizer step per rollout batch, no KL. Grid: layers
{2, 4} x hidden {128, 256} (intermediate 2.6875 x hidden, 4 heads) x torch threads {1, 2} x new tokens
{8, 32}; `--layers/--hidden/--threads/--new-tokens` pick a sub-grid. Per shape, every run of `--runs`
(default: all) runs `--repeats` times, interleaved (all runs once, then again), each run one warm-up step
and `--steps` timed steps; a run's step time is the median of its timed steps and a run's figure the
median over its repeats (the machine may be shared).

Every run is its own process, in its own numerics mode (fp8rl.numerics): the math libraries choose their
kernels once per process, so one process cannot time both modes, and TRL must not run under fp8rl's pin.
fp8rl runs in `fast` mode (the machine's kernels, real bf16 GEMMs where faster: fp8rl.fp8.fastgemm), and
its `bf16` variant also in `reproducible` mode (the pinned path every published table uses): `repro` is
what the pin costs. TRL runs as its users would run it for speed on CPU, with the machine's own kernels
(never fp8rl's pin): `use_cpu`, plain `model.generate` with its KV cache (vLLM does not run on CPU), the
whole batch generated at once (`generation_batch_size` = batch), no activation checkpointing (checked
at every step end: `model.is_activation_checkpointing`), no dataloader workers, `num_iterations=1` and
`beta=0` (no old-policy or reference forward), one log line per step; in fp32 (`bf16=False`) and in bf16
(`bf16=True`: bf16 autocast, real bf16 matmuls), and the faster of the two is TRL's figure.

Every fp8rl run trains on real tokens only (`schedule.remove_padding: true`: the sequences packed into
one row, fp8rl.engine.packing) except `bf16-padded`, the same bf16 run on the rollout batch's padded
layout.

Runs (`--runs`): `bf16` (fp8rl bf16, fast), `bf16-padded` (the same on the padded layout), `bf16-repro`
(fp8rl bf16, reproducible), `fp8` (fp8 tensorwise, fast, no shadow pass), `fp8-block` (fp8 blockwise,
fast), `fp8+shadow` (fp8 with the BF16 shadow pass), `fp8_calib`, `trl-fp32`, `trl-bf16` (and
`trl-fp32-pinned`: TRL fp32 under fp8rl's pin, as this script ran it before; never TRL's figure; not run
unless asked). Printed per shape: step times, `TRL/us` (TRL's faster mode over fp8rl's bf16 step; target
>= 2), `fp8/bf16` and `block/bf16` (targets <= 1.2), `repro` (the reproducible bf16 step over the fast
one), `padded` (the padded layout's bf16 step over the packed one), the BF16 shadow pass's cost
`(fp8+shadow - fp8) / fp8` and calibration's own cost beyond it `(fp8_calib - fp8+shadow) / fp8+shadow`
(target <= 0.03). With one update per step the shadow pass only samples; `--mini-batches 2` runs the
old-log-prob recompute and the shadow pass for real (no TRL run then).

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/vs_trl.py [--steps 6] [--repeats 3] [--layers 2 4] [--threads 1 2] ...
        [--json results/benchmarks/vs_trl.json]

`--json` also writes every shape's medians and ratios with the provenance (commit, packages, machine,
load average at the start and end); `fp8rl publish` does not touch it: copy a run worth quoting to
`results/published/benchmarks/vs_trl.json`, from which `fp8rl quotes` writes the README's and
docs/performance.md's figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROMPTS, GROUP = 16, 8
GRID = {"layers": (2, 4), "hidden": (128, 256), "threads": (1, 2), "new_tokens": (8, 32)}
TRL = "trl GRPOTrainer"
# name -> (trainer, variant, granularity, trainer kwargs, numerics mode, config overrides); TRL's variant
# is its dtype. fp8rl trains on real tokens only (`schedule.remove_padding`) unless a run says otherwise.
PADDED = ("schedule.remove_padding=false",)
RUNS = {
    "bf16": ("fp8rl", "bf16", "none", {"shadow_diagnostics": False}, "fast", ()),
    "bf16-padded": ("fp8rl", "bf16", "none", {"shadow_diagnostics": False}, "fast", PADDED),
    "bf16-repro": ("fp8rl", "bf16", "none", {"shadow_diagnostics": False}, "reproducible", ()),
    "fp8": ("fp8rl", "fp8", "tensorwise", {"shadow_diagnostics": False}, "fast", ()),
    "fp8-block": ("fp8rl", "fp8", "blockwise", {"shadow_diagnostics": False}, "fast", ()),
    "fp8+shadow": ("fp8rl", "fp8", "tensorwise", {}, "fast", ()),
    "fp8_calib": ("fp8rl", "fp8_calib", "tensorwise", {}, "fast", ()),
    "trl-fp32": ("trl", "fp32", "", {}, "fast", ()),
    "trl-bf16": ("trl", "bf16", "", {}, "fast", ()),
    # TRL under fp8rl's pin, as this script ran it before the fast mode: what the pin cost TRL
    "trl-fp32-pinned": ("trl", "fp32", "", {}, "reproducible", ()),
}


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    threads: int
    new_tokens: int

    def __str__(self) -> str:
        return f"L{self.layers} h{self.hidden} t{self.threads} n{self.new_tokens}"


def _cfg(config: str, steps: int, shape: Shape, mini_batches: int = 1, overrides=()):
    from fp8rl.config_loader import load_config

    arch = (
        f"{{hidden_size: {shape.hidden}, num_layers: {shape.layers}, num_heads: 4, "
        f"intermediate_size: {shape.hidden * 43 // 16}, max_position_embeddings: {64 + shape.new_tokens}}}"
    )
    return load_config(
        config,
        [
            f"models=[{{name: tiny, source: scratch, tokenizer: char, arch: {arch}}}]",
            "matrix.models=[tiny]",
            f"schedule.steps={steps + 1}",
            f"schedule.prompts_per_step={PROMPTS}",
            f"algorithms.grpo.group_size={GROUP}",
            f"schedule.max_new_tokens={shape.new_tokens}",
            "schedule.ppo_epochs=1",
            f"schedule.mini_batches={mini_batches}",
            "schedule.temperature=1.0",
            "schedule.top_p=1.0",
            "algorithms.grpo.kl_coef=0.0",
            f"schedule.checkpoint_every={steps + 1}",
            f"resources.train.threads={shape.threads}",
            # a random-init model writes gibberish by design: time every step instead of stopping there
            "stability.on_divergence=continue",
            "schedule.remove_padding=true",
            *overrides,
        ],
    )


def prepare(cfg, root: Path) -> tuple[Path, Path, str]:
    """Data and a random-init base model (the same weights for both trainers)."""
    from fp8rl.engine.data import write_data
    from fp8rl.engine.model import build_model, save_hf
    from fp8rl.engine.tokenizer import build_char_tokenizer

    write_data(cfg, root / "data")
    name = cfg.matrix.models[0]
    tok = build_char_tokenizer()
    save_hf(build_model(cfg.model(name).arch, tok, seed=0), tok, root / "base")
    return root / "data", root / "base", name


def run_fp8rl(cfg, variant: str, gran: str, data: Path, base: Path, model: str, out: Path, **kw) -> float:
    """Median step seconds of one fp8rl run's timed steps (the warm-up step dropped)."""
    from fp8rl.config.runs import RunSpec
    from fp8rl.engine.trainer import Trainer
    from fp8rl.io import read_jsonl

    run = RunSpec("grpo", model, variant, gran, 0)
    summary = Trainer(cfg, run, base_dir=base, data_dir=data, out_dir=out, progress=False, **kw).run()
    rows = read_jsonl(out / "metrics.jsonl")
    if summary["status"] == "failed" or len(rows) < cfg.schedule.steps:  # `diverged` (gibberish) is expected
        raise RuntimeError(f"fp8rl {variant}: {summary['status']} ({summary['reason']})")
    return statistics.median(r["time/step_s"] for r in rows[1:])


def run_trl(cfg, data: Path, base: Path, out: Path, shape: Shape, callbacks=(), bf16: bool = False) -> float:
    """Median step seconds of the same job through TRL's GRPOTrainer (module doc), from a callback;
    `callbacks` are more `TrainerCallback`s to attach (benchmarks/step_profile.py's profiler); `bf16`:
    TRL's bf16 mode (autocast) instead of fp32. Raises if TRL checkpointed activations in a step."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from fp8rl.engine import tasks
    from fp8rl.engine.data import load_split
    from fp8rl.engine.tokenizer import load_tokenizer

    torch.set_num_threads(shape.threads)
    rows = load_split(data, "train.jsonl")
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])

    def reward(completions, answer, **_):
        return [tasks.reward(c, a) for c, a in zip(completions, answer, strict=True)]

    class Timer(TrainerCallback):
        def __init__(self):
            self.starts, self.ends = [], []

        def on_step_begin(self, args, state, control, **kw):
            self.starts.append(time.perf_counter())

        def on_step_end(self, args, state, control, model=None, **kw):
            self.ends.append(time.perf_counter())
            if model is not None and getattr(model, "is_activation_checkpointing", False):
                raise RuntimeError("TRL checkpointed activations: the benchmark asks it not to")

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS * GROUP,
        generation_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=shape.new_tokens,
        num_iterations=1,
        beta=0.0,
        temperature=1.0,
        learning_rate=cfg.schedule.lr,
        max_steps=cfg.schedule.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=bf16,
        gradient_checkpointing=False,
        use_vllm=False,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    timer = Timer()
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=load_tokenizer(base),
        callbacks=[timer, *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # its per-step log dicts would bury the table
    trainer.train()
    return statistics.median(e - s for s, e in list(zip(timer.starts, timer.ends, strict=True))[1:])


def _child(spec: dict) -> float:
    """One run in this process (the `--child` side): its median step seconds."""
    trainer, variant, gran, kw, _, overrides = RUNS[spec["run"]]
    cfg = _cfg(spec["config"], spec["steps"], Shape(*spec["shape"]), spec["mini_batches"], overrides)
    data, base, out = Path(spec["data"]), Path(spec["base"]), Path(spec["out"])
    if trainer == "trl":
        return run_trl(cfg, data, base, out, Shape(*spec["shape"]), bf16=variant == "bf16")
    return run_fp8rl(cfg, variant, gran, data, base, spec["model"], out, **kw)


def run_in_child(spec: dict) -> float:
    """`spec`'s run in a fresh process in the run's numerics mode (module doc)."""
    mode = RUNS[spec["run"]][4]
    env = {**os.environ, "FP8RL_NUMERICS": mode}
    for key in ("MKL_CBWR", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_DYNAMIC"):
        env.pop(key, None)  # fp8rl applies the pin itself in reproducible mode
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True, text=True
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("STEP_S ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{spec['run']} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(lines[-1].split()[1])


def bench_shape(a, shape: Shape, runs: list[str]) -> dict[str, float]:
    """Median step seconds per run on one shape, the runs interleaved over `a.repeats`."""
    cfg = _cfg(a.config, a.steps, shape, a.mini_batches)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, base, model = prepare(cfg, root)
        for rep in range(a.repeats):
            for name in runs:
                spec = {"run": name, "config": a.config, "steps": a.steps, "shape": list(vars(shape).values()),
                        "mini_batches": a.mini_batches, "data": str(data), "base": str(base), "model": model,
                        "out": str(root / f"{name}{rep}")}  # fmt: skip
                times.setdefault(name, []).append(run_in_child(spec))
    return {name: statistics.median(t) for name, t in times.items()}


COLUMNS = ("bf16", "TRL", "TRL/us", "fp8/bf16", "block/bf16", "repro", "padded", "shadow", "calib")


def trl_best(med: dict[str, float]) -> tuple[float, str] | None:
    """TRL's faster mode's step time and its name, if TRL ran."""
    have = [(med[k], k[4:]) for k in ("trl-fp32", "trl-bf16") if k in med]
    return min(have) if have else None


def report_line(shape: Shape, med: dict[str, float]) -> str:
    bf16 = med["bf16"]

    def ratio(num: str, den: str = "bf16", fmt: str = "{:8.2f}") -> str:
        return fmt.format(med[num] / med[den]) if num in med and den in med else f"{'-':>8}"

    def cost(num: str, den: str) -> str:
        return f"{(med[num] - med[den]) / med[den]:+8.1%}" if num in med and den in med else f"{'-':>8}"

    best = trl_best(med)
    trl = f"{best[0]:7.3f} {best[0] / bf16:6.2f}x" if best else f"{'-':>7} {'-':>7}"
    mode = ""
    if best:
        fp32, bf16_trl = med.get("trl-fp32", math.nan), med.get("trl-bf16", math.nan)
        mode = f" (TRL {best[1]}: fp32 {fp32:.3f}, bf16 {bf16_trl:.3f}"
        mode += f", fp32 pinned {med['trl-fp32-pinned']:.3f})" if "trl-fp32-pinned" in med else ")"
    return (
        f"{str(shape):<20} {bf16:7.3f} {trl} {ratio('fp8')} {ratio('fp8-block', fmt='{:10.2f}')} "
        f"{ratio('bf16-repro')} {ratio('bf16-padded')} {cost('fp8+shadow', 'fp8')} "
        f"{cost('fp8_calib', 'fp8+shadow')}{mode}"
    )


def shape_record(shape: Shape, med: dict[str, float]) -> dict:
    """One shape's medians (seconds per step, by run) and the ratios the table prints."""
    best = trl_best(med)
    ratios = {f"{k}/bf16": med[k] / med["bf16"] for k in ("fp8", "fp8-block", "bf16-repro", "bf16-padded")
              if k in med}  # fmt: skip
    if best:
        ratios["trl/bf16"] = best[0] / med["bf16"]
    return {
        "shape": str(shape),
        **vars(shape),
        "step_s": med,
        "trl_mode": best[1] if best else None,
        "ratios": ratios,
    }


def write_record(path: Path, record: dict) -> None:
    """The record with the code, packages and machine it was measured on (fp8rl.provenance), atomically."""
    from fp8rl.io import atomic_write_json
    from fp8rl.provenance import provenance

    atomic_write_json(path, {**record, "load_average_end": os.getloadavg(), "provenance": provenance()})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/smoke.yaml")
    p.add_argument("--steps", type=int, default=6, help="timed steps after one warm-up step")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per shape; medians kept")
    for key, values in GRID.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=int, nargs="+", default=list(values))
    p.add_argument(
        "--runs",
        nargs="+",
        choices=list(RUNS),
        default=[r for r in RUNS if r != "trl-fp32-pinned"],
        help="which runs (module doc)",
    )
    p.add_argument("--skip-trl", action="store_true", help="only fp8rl's runs")
    p.add_argument(
        "--mini-batches", type=int, default=1,
        help="fp8rl updates per rollout batch (>1: recompute and shadow pass run for real; no TRL run)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, help="also write the grid's figures and provenance there (JSON)")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one run, in this process (run_in_child)
    a = p.parse_args(argv)
    if a.child:
        print(f"STEP_S {_child(json.loads(a.child))!r}")
        return 0
    with_trl = not a.skip_trl and a.mini_batches == 1
    runs = [r for r in a.runs if with_trl or RUNS[r][0] != "trl"]
    if "bf16" not in runs:
        runs.insert(0, "bf16")
    if any(RUNS[r][0] == "trl" for r in runs):
        try:
            import trl  # noqa: F401
        except ImportError:
            print("TRL is not installed: pip install -e '.[bench]' (or pass --skip-trl)", file=sys.stderr)
            return 2
    shapes = [Shape(*s) for s in itertools.product(a.layers, a.hidden, a.threads, a.new_tokens)]
    print(
        f"{PROMPTS} prompts x {GROUP} samples, {a.mini_batches} update(s)/step, {a.steps} timed steps, "
        f"median of {a.repeats} interleaved repeats; step times in s; runs: {' '.join(runs)}"
    )
    print(f"{'shape':<20} {'bf16':>7} {'TRL':>7} {'TRL/us':>7} {'fp8/bf16':>8} {'block/bf16':>10} "
          f"{'repro':>8} {'padded':>8} {'shadow':>8} {'calib':>8}")  # fmt: skip
    worst = math.inf
    record = {"benchmark": "vs_trl", "command": ["benchmarks/vs_trl.py", *(argv or sys.argv[1:])],
              "steps": a.steps, "repeats": a.repeats, "runs": runs, "load_average_start": os.getloadavg(),
              "shapes": []}  # fmt: skip
    for shape in shapes:
        med = bench_shape(a, shape, runs)
        print(report_line(shape, med), flush=True)
        best = trl_best(med)
        if best:
            worst = min(worst, best[0] / med["bf16"])
        if a.json:  # rewritten after every shape: a long grid stopped midway keeps what it measured
            record["shapes"].append(shape_record(shape, med))
            write_record(a.json, record)
    if worst < math.inf:
        print(f"slowest shape: fp8rl bf16 {worst:.2f}x faster than TRL's faster mode (target >= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
