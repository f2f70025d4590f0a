"""The `limits` section: bounds on what one config may ask of a machine, checked before any work.

A value past its bound is almost always a typo (`prompts_per_step: 1e9`, `sft.steps: 1e12`, `lr:
1e300`), and found late it costs a run that never ends, an empty `MemoryError` or an overflow at step
0. `limit_problems` names each key past its bound with the bound and the way to raise it: a config that
means it writes the key under `limits` (`limits: {schedule.prompts_per_step: 200000}`), so the choice is
in the file, not in someone's environment. The bounds sit far above every shipped tier (the paper tier
included) and far below what overflows or cannot fit a node.
"""

from __future__ import annotations

from typing import Any

# key (`algorithms.*` / `resources.*`: every entry of that mapping) -> (bound, what it protects)
LIMITS: dict[str, tuple[float, str]] = {
    "schedule.prompts_per_step": (65_536, "prompts per RL step"),
    "algorithms.*.group_size": (1_024, "samples per prompt"),
    "rollout_sequences": (262_144, "rollout sequences per step (prompts_per_step x group_size)"),
    "schedule.max_new_tokens": (131_072, "generated tokens per response"),
    "schedule.lr": (10.0, "learning rate (Adam's step is about lr per weight)"),
    "schedule.weight_decay": (1_000.0, "weight decay (a weight shrinks by lr x weight_decay per step)"),
    "sft.steps": (1_000_000, "SFT steps"),
    "sft.batch_size": (65_536, "SFT examples per step"),
    "sft.lr": (10.0, "SFT learning rate"),
    "task.n_train": (10_000_000, "training problems"),
    "task.n_test": (10_000_000, "test problems"),
    "tis.cap": (10_000.0, "importance-weight cap"),
    "eval.max_gen_toks": (131_072, "generated tokens per eval answer"),
    "eval.batch_size": (65_536, "eval batch size"),
    "resources.*.threads": (1_024, "threads of one job"),
    "resources.*.gpus": (1_024, "GPUs of one job"),
    "resources.*.mem_mb": (4_194_304, "MB of memory of one job, 4 TiB"),
    "resources.*.runtime": (43_200, "minutes of one job, 30 days"),
    "schedule.ppo_epochs": (1_000, "passes over a step's rollouts"),
    "models.*.arch.hidden_size": (65_536, "hidden size of a model built from scratch"),
    "models.*.arch.num_layers": (1_024, "layers of a model built from scratch"),
    "models.*.arch.num_heads": (1_024, "attention heads of a model built from scratch"),
    "models.*.arch.intermediate_size": (262_144, "MLP width of a model built from scratch"),
    "models.*.arch.max_position_embeddings": (1_048_576, "positions of a model built from scratch"),
    "scratch_params": (10_000_000_000, "weights of a model built from scratch"),
}


# bounds on a value the config implies rather than states: checked in limit_problems
_DERIVED = ("rollout_sequences", "scratch_params")


def _scratch_params(arch: Any, vocab: int = 256) -> int:
    """About how many weights a Llama of `arch` has (attention, gated MLP, embeddings and head; the char
    tokenizer's vocabulary is far below `vocab`)."""
    h, kv = arch.hidden_size, arch.num_kv_heads or arch.num_heads
    head = h // arch.num_heads
    per_layer = 2 * h * h + 2 * h * kv * head + 3 * h * arch.intermediate_size
    return arch.num_layers * per_layer + 2 * vocab * h


def _values(cfg: Any) -> list[tuple[str, str, float]]:
    """(limit key, the config's key path, its value) for every value a limit bounds."""
    out: list[tuple[str, str, float]] = []
    for key in LIMITS:
        if key in _DERIVED:
            continue
        section, *rest = key.split(".")
        if rest[0] == "*":
            mapping = getattr(cfg, section)
            if isinstance(mapping, list):  # models: by position, as the loader names list entries
                items = enumerate(mapping)
            else:
                items = mapping.items() if isinstance(mapping, dict) else mapping.model_dump().items()
            for name, entry in items:
                value = entry
                for field in rest[1:]:
                    value = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
                if value is not None:
                    out.append((key, ".".join([section, str(name), *rest[1:]]), value))
        else:
            value = getattr(getattr(cfg, section), rest[0])
            if value is not None:
                out.append((key, key, value))
    return out


def _show(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def limit_problems(cfg: Any) -> list[tuple[tuple, str]]:
    """Every value of `cfg` (an ExperimentConfig) past its bound, as `(key path, message)` pairs naming
    the bound and how to raise it (`fp8rl.config_loader` reports them with every config it reads)."""
    bound = {k: cfg.limits.get(k, default) for k, (default, _) in LIMITS.items()}
    problems = []
    for key, path, value in _values(cfg):
        if value > bound[key]:
            problems.append((tuple(int(p) if p.isdigit() else p for p in path.split(".")), (
                f"{_show(value)} is above the limit {_show(bound[key])} ({LIMITS[key][1]}); raise it with "
                f"`limits: {{{key}: ...}}` if you mean it")))  # fmt: skip
    prompts = cfg.schedule.prompts_per_step
    for name in cfg.matrix.algorithms:
        group = cfg.algorithm(name).group_size
        if prompts * group > bound["rollout_sequences"]:
            problems.append((("schedule", "prompts_per_step"), (
                f"{prompts} x algorithms.{name}.group_size {group} = {_show(prompts * group)} rollout "
                f"sequences per step, above the limit {_show(bound['rollout_sequences'])}; raise it with "
                "`limits: {rollout_sequences: ...}` if you mean it")))  # fmt: skip
    for i, model in enumerate(cfg.models):
        if model.arch is not None and (n := _scratch_params(model.arch)) > bound["scratch_params"]:
            problems.append((("models", i, "arch"), (
                f"about {n:.3g} weights, above the limit {bound['scratch_params']:.3g} ({LIMITS['scratch_params'][1]}); "
                "raise it with `limits: {scratch_params: ...}` if you mean it")))  # fmt: skip
    return problems
