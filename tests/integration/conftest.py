"""Session fixtures of the trainer's integration tests: a tiny tier (a 2-layer model, one-digit
additions, a short SFT; about 10 s on one core) shared by every test, `write_config` for variants of
its config, and `train` to run one cell of it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
import yaml

TINY = {
    "tier": "smoke",
    "backend": "reference",
    "models": [
        {
            "name": "tiny",
            "source": "scratch",
            "arch": {
                "hidden_size": 64,
                "num_layers": 2,
                "num_heads": 4,
                "intermediate_size": 128,
                "max_position_embeddings": 32,
            },
        }
    ],
    "algorithms": {
        "grpo": {"clip_low": 0.2, "clip_high": 0.2, "group_size": 8},
        "dapo": {
            "clip_low": 0.2,
            "clip_high": 0.28,
            "clip_c": 3.0,
            "group_size": 8,
            "overlong_buffer_len": 1,
        },
    },
    "matrix": {
        "algorithms": ["grpo", "dapo"],
        "models": ["tiny"],
        "variants": ["bf16", "fp8", "fp8_tis", "fp8_calib", "fp8_tis_calib"],
        "granularities": ["tensorwise"],
        "variant_granularities": {"fp8": ["tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"]},
        "seeds": [0, 1],
    },
    "fp8": {"optimizer": "blockwise"},  # no torch.compile warm-up in tests (torchao's AdamWFp8 compiles)
    "schedule": {
        "steps": 3,
        "prompts_per_step": 6,
        "mini_batches": 2,
        "lr": 2e-3,
        "max_new_tokens": 3,
        "checkpoint_every": 2,
    },
    "task": {"name": "arithmetic", "levels": ["add1"], "n_train": 70, "n_test": 20, "seed": 7},
    "sft": {"steps": 150, "batch_size": 32, "lr": 3e-3},
    "stability": {"entropy_spike_k": 50.0, "entropy_spike_m": 3, "baseline_steps": 2},
}


def write_config(path: Path, overrides: dict | None = None) -> Path:
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    for key, value in (overrides or {}).items():
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def tiny_tier(root: Path) -> Path:
    from fp8rl.config_loader import load_config
    from fp8rl.engine.data import write_data
    from fp8rl.engine.sft import run_sft

    config = write_config(root / "config.yaml")
    cfg = load_config(config)
    write_data(cfg, root / "data")
    run_sft(cfg, "tiny", root / "data", root / "base" / "tiny", progress=False)
    return config


@pytest.fixture(scope="session")
def tier(tmp_path_factory):
    """(root, config path, write_config) of the tiny tier with data and an SFT base model."""
    root = tmp_path_factory.mktemp("tier")
    threads = torch.get_num_threads()
    config = tiny_tier(root)
    torch.set_num_threads(threads)
    return root, config, write_config


@pytest.fixture
def restore_torch_globals():
    """The trainer sets torch's thread count and deterministic mode; give them back after a test."""
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)


def _train(tier, run_id: str, out: Path, overrides: dict | None = None, **kw):
    from fp8rl.config.runs import find_run
    from fp8rl.config_loader import load_config
    from fp8rl.engine.trainer import Trainer

    root, _, write_config = tier
    config = write_config(out.parent / f"{out.name}.yaml", overrides)
    cfg = load_config(config)
    trainer = Trainer(cfg, find_run(cfg, run_id), base_dir=root / "base" / "tiny", data_dir=root / "data",
                      out_dir=out, progress=False, **kw)  # fmt: skip
    summary = trainer.run()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return trainer, summary, rows


@pytest.fixture
def train(tier):
    """`train(run_id, out_dir, overrides=None, **trainer_kwargs) -> (trainer, summary, metrics rows)`:
    one run of the tiny tier with `overrides` (dotted keys) applied to its config."""
    return functools.partial(_train, tier)
