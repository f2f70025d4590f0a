"""fp8rl's reference trainer vs TRL's `GRPOTrainer` on the same tiny model and workload, side by side.

Workload (both): the smoke tier's tiny Llama (random init from `config/smoke.yaml`'s arch, char
tokenizer), GRPO, 16 prompts x 8 samples, 8 new tokens, temperature 1, one PPO epoch with one optimizer
step per rollout batch, no KL; one warm-up step, then `--steps` (10) timed steps. TRL generates with
plain `model.generate` (no vLLM) and trains in fp32; fp8rl runs its `bf16` variant (bf16-emulated
GEMMs) with its own batched KV-cached sampler. Throughput = generated response tokens / wall time of
the whole step (rollout + scoring + update), the mean over the timed steps; each trainer runs
`--repeats` times, interleaved, and its best repeat counts (the machine may be shared). With one update
per rollout batch the old log-probs are the update's own forward (TRL and fp8rl alike) and the shadow
pass of calibrated clipping has nothing to compare; `--mini-batches 2` measures fp8rl's ratios with the
recompute and the shadow pass running (no TRL run then).

Also prints fp8rl's step-time ratios fp8 / bf16 and fp8_calib / fp8 (tensorwise, the config's FP8
options; the fp8 run skips the shadow diagnostic pass so the ratio isolates calibration's cost).
Targets: fp8rl >= 2x TRL tokens/s; fp8 / bf16 <= 1.5; fp8_calib / fp8 <= 1.03.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/vs_trl.py [--config config/smoke.yaml] [--steps 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

PROMPTS, GROUP, NEW_TOKENS = 16, 8, 8


def _cfg(config: str, steps: int, threads: int, mini_batches: int = 1):
    from fp8rl.config_loader import load_config

    return load_config(
        config,
        [
            f"schedule.steps={steps + 1}",
            f"schedule.prompts_per_step={PROMPTS}",
            f"algorithms.grpo.group_size={GROUP}",
            f"schedule.max_new_tokens={NEW_TOKENS}",
            "schedule.ppo_epochs=1",
            f"schedule.mini_batches={mini_batches}",
            "schedule.temperature=1.0",
            "schedule.top_p=1.0",
            "algorithms.grpo.kl_coef=0.0",
            f"schedule.checkpoint_every={steps + 1}",
            f"resources.train.threads={threads}",
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


def run_fp8rl(cfg, variant: str, gran: str, data: Path, base: Path, model: str, out: Path, **kw) -> dict:
    """Timed steps of one fp8rl run: mean step seconds and generated tokens/s (warm-up step dropped)."""
    from fp8rl.engine.trainer import Trainer
    from fp8rl.matrix import RunSpec

    run = RunSpec("grpo", model, variant, gran, 0)
    summary = Trainer(cfg, run, base_dir=base, data_dir=data, out_dir=out, progress=False, **kw).run()
    if summary["status"] != "ok":
        raise RuntimeError(f"fp8rl {variant}: {summary['status']} ({summary['reason']})")
    from fp8rl.io import read_jsonl

    rows = read_jsonl(out / "metrics.jsonl")[1:]
    secs = sum(r["time/step_s"] for r in rows)
    return {"step_s": secs / len(rows), "tokens_per_s": sum(r["tok/rollout"] for r in rows) / secs}


def run_trl(cfg, data: Path, base: Path, out: Path, threads: int) -> dict:
    """The same workload through TRL's GRPOTrainer; step times from a callback."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from fp8rl.engine import tasks
    from fp8rl.engine.data import load_split
    from fp8rl.engine.tokenizer import load_tokenizer

    torch.set_num_threads(threads)
    rows = load_split(data, "train.jsonl")
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])

    def reward(completions, answer, **_):
        return [tasks.reward(c, a) for c, a in zip(completions, answer, strict=True)]

    class Timer(TrainerCallback):
        def __init__(self):
            self.starts, self.ends, self.tokens = [], [], []

        def on_step_begin(self, args, state, control, **kw):
            self.starts.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(logs["completions/mean_length"] * PROMPTS * GROUP)

    steps = cfg.schedule.steps
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        num_iterations=1,
        beta=0.0,
        temperature=1.0,
        learning_rate=cfg.schedule.lr,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    tok = load_tokenizer(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    timer = Timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        callbacks=[timer],
    )
    trainer.train()
    secs = [e - s for s, e in zip(timer.starts, timer.ends, strict=True)][1:]
    toks = timer.tokens[1 : 1 + len(secs)]
    return {"step_s": sum(secs) / len(secs), "tokens_per_s": sum(toks) / sum(secs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="config/smoke.yaml")
    p.add_argument("--steps", type=int, default=10, help="timed steps after one warm-up step")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-trl", action="store_true", help="only fp8rl's variant ratios")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats; the best of each is kept")
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
    cfg = _cfg(a.config, a.steps, a.threads, a.mini_batches)
    variants = [("fp8rl bf16", "bf16", "none", {}),
                ("fp8rl fp8", "fp8", "tensorwise", {"shadow_diagnostics": False}),
                ("fp8rl fp8_calib", "fp8_calib", "tensorwise", {})]  # fmt: skip
    res: dict[str, dict] = {}

    def keep(name: str, r: dict) -> None:
        if name not in res or r["step_s"] < res[name]["step_s"]:
            res[name] = r

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, base, model = prepare(cfg, root)
        for rep in range(a.repeats):  # interleaved repeats, best of each: robust to a busy machine
            for name, variant, gran, kw in variants:
                keep(name, run_fp8rl(cfg, variant, gran, data, base, model, root / f"{variant}{rep}", **kw))
            if with_trl:
                keep("trl GRPOTrainer", run_trl(cfg, data, base, root / f"trl{rep}", a.threads))
    print(
        f"\n{PROMPTS} prompts x {GROUP} samples, {NEW_TOKENS} new tokens, {a.mini_batches} update(s)/step, "
        f"{a.steps} timed steps, best of {a.repeats}, {a.threads} thread(s)"
    )
    for name, r in res.items():
        print(f"  {name:<18} step {r['step_s']:.3f} s   {r['tokens_per_s']:.0f} generated tokens/s")
    if "trl GRPOTrainer" in res:
        ratio = res["fp8rl bf16"]["tokens_per_s"] / res["trl GRPOTrainer"]["tokens_per_s"]
        print(f"fp8rl bf16 / TRL tokens/s      {ratio:.2f}x   (target >= 2)")
    fp8, bf16, calib = (res[f"fp8rl {v}"]["step_s"] for v in ("fp8", "bf16", "fp8_calib"))
    print(f"fp8 / bf16 step time           {fp8 / bf16:.2f}    (target <= 1.5)")
    print(f"fp8_calib / fp8 step time      {calib / fp8:.2f}    (target <= 1.03)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
