"""`fp8rl sft`: the BF16 warm start that turns a randomly initialised scratch model into the base model of
every RL run of a tier.

Supervised next-token training on `prompt -> target<eos>` pairs (arithmetic answers and, for the agent
benchmark, `calc(op,a,b)` calls), loss on the target tokens only, AdamW with linear warm-up and cosine
decay, linears emulating bf16 (operands rounded to bf16, fp32 compute: docs/architecture.md#emulation-on-cpu). The step count
and learning rate in `sft` are tuned per tier so that the base model is useful but imperfect on the RL
task (greedy test accuracy roughly 20-60 %), leaving reward for RL to gain; with `sft.stop_at_accuracy`
the SFT stops once the base samples right answers to that share of a fixed set of training prompts, so
that bases of different seeds start RL from about the same reward. Writes the model in Hugging
Face format plus `sft.json` (loss curve summary, test accuracies, seconds, provenance).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from fp8rl.config import ExperimentConfig
from fp8rl.engine import tasks
from fp8rl.engine.bpe_tokenizer import scratch_tokenizer
from fp8rl.engine.data import load_split
from fp8rl.engine.heartbeat import SFT_FIELDS, Heartbeat
from fp8rl.engine.model import build_model, count_parameters, save_hf
from fp8rl.engine.policy_accuracy import accuracy
from fp8rl.engine.precision import bf16_emulation
from fp8rl.provenance import provenance

TOOL_FRACTION = 0.2  # share of SFT batches drawn from the function-calling examples


def _examples(tokenizer, rows: list[dict]) -> list[tuple[list[int], list[int]]]:
    out = []
    for r in rows:
        p = tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
        t = tokenizer(tasks.sft_target(r), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((p, t))
    return out


def collate(
    examples: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `(input_ids, attention_mask, labels)`; labels are -100 outside the targets."""
    width = max(len(p) + len(t) for p, t in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (p, t) in enumerate(examples):
        seq = p + t
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = torch.tensor(t)
    return ids, mask, labels


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak`, then cosine decay to 10 % of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(total - warmup, 1)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def sft_seed(task_seed: int, run_seed: int | None) -> int:
    """The seed of a base model's initialisation and batch order: the task's seed for the shared base,
    a distinct one per RL seed with `sft.per_seed` (the data, made from the task's seed, stay the same)."""
    return task_seed if run_seed is None else task_seed + 1_000_003 * (run_seed + 1)


class SFTStopUnmet(ValueError):
    """A base's SFT reached `sft.steps` without meeting `sft.stop_at_accuracy` (`on_unmet_stop: refuse`)."""


class _StopRule:
    """`sft.stop_at_accuracy`: every `check_every` steps, the model samples one answer to each of a fixed
    random subset of `check_prompts` training prompts (the same subset for every seed's base; its own
    generator, so the SFT's batches are those of a run without the rule); the SFT stops at the first
    check whose accuracy reaches the target. `checks` records (step, accuracy) of every check."""

    def __init__(self, cfg: ExperimentConfig, tokenizer, rows: list[dict], init_seed: int):
        s = cfg.sft
        self.cfg, self.tokenizer, self.checks = cfg, tokenizer, []
        self.met = False  # a check reached the target (the SFT stopped there)
        if s.stop_at_accuracy is None:
            self.rows = []
            return
        pick = torch.randperm(len(rows), generator=torch.Generator().manual_seed(cfg.task.seed + 2))
        self.rows = [rows[i] for i in pick[: s.check_prompts].tolist()]
        self.gen = torch.Generator().manual_seed(init_seed + 3)

    def reached(self, model: torch.nn.Module, step: int) -> bool:
        s = self.cfg.sft
        if not self.rows or step == 0 or step % s.check_every:
            return False
        model.eval()
        acc = accuracy(
            model,
            self.tokenizer,
            self.rows,
            max_new_tokens=self.cfg.schedule.max_new_tokens,
            temperature=self.cfg.schedule.temperature,
            generator=self.gen,
            verifier=tasks.reward_fn(self.cfg.task.name),
        )
        model.train()
        self.checks.append([step, acc])
        print(
            f"sft stop rule: step {step}: sampled accuracy {acc:.3f} (target {s.stop_at_accuracy:g})",
            file=sys.stderr,
        )
        self.met = acc >= s.stop_at_accuracy
        return self.met


def run_sft(
    cfg: ExperimentConfig,
    model_name: str,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    seed: int | None = None,
    progress: bool = True,
) -> dict:
    """Train the base model of `model_name` and save it to `out_dir`; returns the `sft.json` content.
    `seed`: the RL seed this base belongs to (`sft.per_seed`), None for the tier's shared base."""
    mcfg = cfg.model(model_name)
    if mcfg.source != "scratch":
        raise ValueError(
            f"model {model_name!r}: fp8rl sft builds scratch models only (source is {mcfg.source!r})"
        )
    torch.set_num_threads(cfg.resources_for("sft").threads)
    t0 = time.perf_counter()
    tokenizer = scratch_tokenizer(mcfg.tokenizer, data_dir)
    init_seed = sft_seed(cfg.task.seed, seed)
    model = build_model(mcfg.arch, tokenizer, seed=init_seed)
    precision = bf16_emulation(model)
    train_rows = load_split(data_dir, "train.jsonl")
    train = _examples(tokenizer, train_rows)
    tool_path = Path(data_dir) / "tool_train.jsonl"
    tool = _examples(tokenizer, load_split(data_dir, "tool_train.jsonl")) if tool_path.is_file() else []
    s = cfg.sft
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(init_seed)
    warmup = max(s.steps // 20, 1)
    losses: list[float] = []
    stop = _StopRule(cfg, tokenizer, train_rows, init_seed)
    model.train()
    # without a bar (under the DAG, --no-progress) a line of step, loss, elapsed and ETA every few seconds
    name = f"sft {model_name}" + ("" if seed is None else f"/seed{seed}")
    beat = None if progress else Heartbeat(name, s.steps, fields=SFT_FIELDS)
    for step in tqdm(range(s.steps), desc=f"sft {model_name}", disable=not progress, mininterval=2.0):
        if stop.reached(model, step):
            break
        # One pool per batch (tool calls are longer: mixing them would pad every arithmetic batch).
        pool = tool if tool and float(torch.rand((), generator=gen)) < TOOL_FRACTION else train
        idx = torch.randint(len(pool), (s.batch_size,), generator=gen).tolist()
        ids, mask, labels = collate([pool[i] for i in idx], tokenizer.pad_token_id)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, s.steps, s.lr, warmup)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if beat is not None:
            beat.update(step + 1, {"loss": losses[-1]})
    train_s = time.perf_counter() - t0
    if s.stop_at_accuracy is not None and not stop.met and s.on_unmet_stop == "refuse":
        last = f"{stop.checks[-1][1]:.3f} at step {stop.checks[-1][0]}" if stop.checks else "no check ran"
        raise SFTStopUnmet(
            f"base {model_name}{'' if seed is None else f'/seed{seed}'}: the SFT reached its {s.steps}-step cap "
            f"without meeting sft.stop_at_accuracy {s.stop_at_accuracy:g} (last check: {last}); no base was "
            "written. Raise sft.steps, lower the target, or keep such bases with sft.on_unmet_stop: keep "
            "(they are then named in the base models table and SUMMARY.md)"
        )
    model.eval()
    test = load_split(data_dir, "test.jsonl")
    eval_gen = torch.Generator().manual_seed(cfg.task.seed + 1)
    verifier = tasks.reward_fn(cfg.task.name)
    acc_greedy = accuracy(
        model, tokenizer, test, max_new_tokens=cfg.schedule.max_new_tokens, greedy=True, verifier=verifier
    )
    acc_sampled = accuracy(
        model,
        tokenizer,
        test,
        max_new_tokens=cfg.schedule.max_new_tokens,
        temperature=cfg.schedule.temperature,
        generator=eval_gen,
        verifier=verifier,
    )
    tail = losses[-max(len(losses) // 10, 1) :]
    info = {
        "model": model_name,
        "seed": seed,
        "sft_seed": init_seed,
        "parameters": count_parameters(model),
        "steps": len(losses),
        "batch_size": s.batch_size,
        "lr": s.lr,
        "precision": precision,
        "examples": len(train) + len(tool),
        # None with `sft.steps: 0` (the random-init model is saved as the base).
        "loss/first": losses[0] if losses else None,
        "loss/final": sum(tail) / len(tail) if tail else None,
        "acc/test_greedy": acc_greedy,
        "acc/test_sampled": acc_sampled,
        "n_test": len(test),
        "seconds": round(time.perf_counter() - t0, 3),
        "train_seconds": round(train_s, 3),
        "threads": torch.get_num_threads(),
        "provenance": provenance(cfg.digest()),
    }
    if s.stop_at_accuracy is not None:
        info.update(
            {"max_steps": s.steps, "stop_at_accuracy": s.stop_at_accuracy, "stop_checks": stop.checks,
             "stop_met": stop.met}
        )  # fmt: skip
    import json

    save_hf(model, tokenizer, out_dir, extra={"sft.json": (json.dumps(info, indent=2) + "\n").encode()})
    return info
