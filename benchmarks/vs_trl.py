"""fp8rl's reference trainer vs TRL's `GRPOTrainer` on the same tiny model and workload, side by side.

Workload (both): the smoke tier's tiny Llama (random init from `config/smoke.yaml`'s arch, char
tokenizer), GRPO, 16 prompts x 8 samples, 8 new tokens, temperature 1, one PPO epoch with one optimizer
step per rollout batch, no KL; one warm-up step, then `--steps` (10) timed steps. TRL generates with
plain `model.generate` (no vLLM) and trains in fp32; fp8rl runs its `bf16` variant (bf16-emulated
GEMMs) with its own batched KV-cached sampler. Throughput = generated response tokens / wall time of
the whole step (rollout + scoring + update), the mean over the timed steps.

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


def _cfg(config: str, steps: int, threads: int):
    from fp8rl.config_loader import load_config

    return load_config(
        config,
        [
            f"schedule.steps={steps + 1}",
            f"schedule.prompts_per_step={PROMPTS}",
            f"algorithms.grpo.group_size={GROUP}",
            f"schedule.max_new_tokens={NEW_TOKENS}",
            "schedule.ppo_epochs=1",
            "schedule.mini_batches=1",
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
    from fp8rl.config import RunSpec
    from fp8rl.engine.trainer import Trainer

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
    a = p.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        if not a.skip_trl:
            print("TRL is not installed: pip install -e '.[bench]' (or pass --skip-trl)", file=sys.stderr)
            return 2
    cfg = _cfg(a.config, a.steps, a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, base, model = prepare(cfg, root)
        res = {"fp8rl bf16": run_fp8rl(cfg, "bf16", "none", data, base, model, root / "bf16")}
        res["fp8rl fp8"] = run_fp8rl(
            cfg, "fp8", "tensorwise", data, base, model, root / "fp8", shadow_diagnostics=False
        )
        res["fp8rl fp8_calib"] = run_fp8rl(cfg, "fp8_calib", "tensorwise", data, base, model, root / "calib")
        if not a.skip_trl:
            res["trl GRPOTrainer"] = run_trl(cfg, data, base, root / "trl", a.threads)
    print(
        f"\n{PROMPTS} prompts x {GROUP} samples, {NEW_TOKENS} new tokens, {a.steps} timed steps, {a.threads} thread(s)"
    )
    for name, r in res.items():
        print(f"  {name:<18} step {r['step_s']:.3f} s   {r['tokens_per_s']:.0f} generated tokens/s")
    if "trl GRPOTrainer" in res:
        ratio = res["fp8rl bf16"]["tokens_per_s"] / res["trl GRPOTrainer"]["tokens_per_s"]
        print(f"fp8rl bf16 / TRL tokens/s      {ratio:.2f}x   (target >= 2)")
    print(
        f"fp8 / bf16 step time           {res['fp8rl fp8']['step_s'] / res['fp8rl bf16']['step_s']:.2f}    (target <= 1.5)"
    )
    print(
        f"fp8_calib / fp8 step time      {res['fp8rl fp8_calib']['step_s'] / res['fp8rl fp8']['step_s']:.2f}    (target <= 1.03)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
