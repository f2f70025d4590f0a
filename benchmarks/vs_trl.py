"""fp8rl's reference trainer vs TRL's `GRPOTrainer` on the same tiny model and job, over a grid of shapes.

Job (both trainers): a randomly initialised Llama with the smoke tier's char tokenizer, GRPO, 16 prompts x
8 samples, temperature 1, one PPO epoch with one optimizer step per rollout batch, no KL. Grid: layers
{2, 4} x hidden {128, 256} (intermediate 2.6875 x hidden, 4 heads) x torch threads {1, 2} x new tokens
{8, 32}; `--layers/--hidden/--threads/--new-tokens` pick a sub-grid. Per shape, every trainer runs
`--repeats` times, interleaved (fp8rl bf16, fp8rl fp8, fp8rl fp8 + shadow, fp8rl fp8_calib, TRL; then
again), each run one warm-up step and `--steps` timed steps; a run's step time is the median of its timed
steps and a trainer's the median over its repeats (the machine may be shared).

TRL as its users would configure it for speed on CPU: `use_cpu`, fp32 (`bf16=False`: no bf16 autocast,
whose matmuls most CPUs run slower than fp32), plain `model.generate` with its KV cache (vLLM does not
run on CPU), the whole batch generated at once (`generation_batch_size` = batch), no gradient
checkpointing, no dataloader workers, `num_iterations=1` and `beta=0` (no old-policy or reference
forward), one log line per step (how the step's generated tokens are read). fp8rl runs its `bf16`
variant (bf16-emulated GEMMs) with its own batched KV-cached sampler; with one update per rollout batch
its old log-probs are the update's own forward, as TRL's are.

Printed per shape: step times, `TRL / fp8rl bf16` (target >= 2), `fp8 / bf16` (target <= 1.5), the BF16
shadow pass's cost `(fp8+shadow - fp8) / fp8`, and calibration's own cost beyond the shadow pass
`(fp8_calib - fp8+shadow) / fp8+shadow` (target <= 0.03). With one update per step the shadow pass only
samples; `--mini-batches 2` runs the old-log-prob recompute and the shadow pass for real (no TRL run then).

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/vs_trl.py [--steps 6] [--repeats 3] [--layers 2 4] [--threads 1 2] ...
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROMPTS, GROUP = 16, 8
GRID = {"layers": (2, 4), "hidden": (128, 256), "threads": (1, 2), "new_tokens": (8, 32)}
TRL = "trl GRPOTrainer"


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    threads: int
    new_tokens: int

    def __str__(self) -> str:
        return f"L{self.layers} h{self.hidden} t{self.threads} n{self.new_tokens}"


def _cfg(config: str, steps: int, shape: Shape, mini_batches: int = 1):
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
    from fp8rl.engine.trainer import Trainer
    from fp8rl.io import read_jsonl
    from fp8rl.matrix import RunSpec

    run = RunSpec("grpo", model, variant, gran, 0)
    summary = Trainer(cfg, run, base_dir=base, data_dir=data, out_dir=out, progress=False, **kw).run()
    rows = read_jsonl(out / "metrics.jsonl")
    if summary["status"] == "failed" or len(rows) < cfg.schedule.steps:  # `diverged` (gibberish) is expected
        raise RuntimeError(f"fp8rl {variant}: {summary['status']} ({summary['reason']})")
    return statistics.median(r["time/step_s"] for r in rows[1:])


def run_trl(cfg, data: Path, base: Path, out: Path, shape: Shape, callbacks=()) -> float:
    """Median step seconds of the same job through TRL's GRPOTrainer (module doc), from a callback;
    `callbacks` are more `TrainerCallback`s to attach (benchmarks/step_profile.py's profiler)."""
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

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())

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
        bf16=False,
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


def bench_shape(a, shape: Shape, with_trl: bool) -> dict[str, float]:
    """Median step seconds per trainer on one shape, the trainers interleaved over `a.repeats`."""
    cfg = _cfg(a.config, a.steps, shape, a.mini_batches)
    variants = [("fp8rl bf16", "bf16", "none", {"shadow_diagnostics": False}),
                ("fp8rl fp8", "fp8", "tensorwise", {"shadow_diagnostics": False}),
                ("fp8rl fp8+shadow", "fp8", "tensorwise", {}),
                ("fp8rl fp8_calib", "fp8_calib", "tensorwise", {})]  # fmt: skip
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, base, model = prepare(cfg, root)
        for rep in range(a.repeats):
            for name, variant, gran, kw in variants:
                out = root / f"{name.replace(' ', '_')}{rep}"
                times.setdefault(name, []).append(run_fp8rl(cfg, variant, gran, data, base, model, out, **kw))
            if with_trl:
                times.setdefault(TRL, []).append(run_trl(cfg, data, base, root / f"trl{rep}", shape))
    return {name: statistics.median(t) for name, t in times.items()}


def report_line(shape: Shape, med: dict[str, float]) -> str:
    bf16, fp8, shadow, calib = (med[f"fp8rl {v}"] for v in ("bf16", "fp8", "fp8+shadow", "fp8_calib"))
    trl = f"{med[TRL]:7.3f} {med[TRL] / bf16:6.2f}x" if TRL in med else f"{'-':>7} {'-':>7}"
    return (
        f"{str(shape):<20} {bf16:7.3f} {trl} {fp8 / bf16:8.2f} {(shadow - fp8) / fp8:+8.1%} "
        f"{(calib - shadow) / shadow:+8.1%}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/smoke.yaml")
    p.add_argument("--steps", type=int, default=6, help="timed steps after one warm-up step")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per shape; medians kept")
    for key, values in GRID.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=int, nargs="+", default=list(values))
    p.add_argument("--skip-trl", action="store_true", help="only fp8rl's variant ratios")
    p.add_argument(
        "--mini-batches", type=int, default=1,
        help="fp8rl updates per rollout batch (>1: recompute and shadow pass run for real; no TRL run)",
    )  # fmt: skip
    a = p.parse_args(argv)
    with_trl = not a.skip_trl and a.mini_batches == 1
    if with_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            print("TRL is not installed: pip install -e '.[bench]' (or pass --skip-trl)", file=sys.stderr)
            return 2
    shapes = [Shape(*s) for s in itertools.product(a.layers, a.hidden, a.threads, a.new_tokens)]
    print(
        f"{PROMPTS} prompts x {GROUP} samples, {a.mini_batches} update(s)/step, {a.steps} timed steps, "
        f"median of {a.repeats} interleaved repeats; step times in s"
    )
    print(f"{'shape':<20} {'fp8rl':>7} {'TRL':>7} {'TRL/us':>7} {'fp8/bf16':>8} {'shadow':>8} {'calib':>8}")
    worst = math.inf
    for shape in shapes:
        med = bench_shape(a, shape, with_trl)
        print(report_line(shape, med), flush=True)
        if TRL in med:
            worst = min(worst, med[TRL] / med["fp8rl bf16"])
    if with_trl:
        print(f"slowest shape: fp8rl bf16 {worst:.2f}x faster than TRL (target >= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
