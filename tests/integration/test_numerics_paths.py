"""Proof that the numerics pin holds where it matters: a short SFT + RL run through the `fp8rl` command,
under two different kernel paths (as two machines of one kind would take), gives byte-identical
metrics with the pin (`numerics: reproducible`, the default) and different ones without it (`fast`).

The kernel paths differ through MKL's branch, ATen's vector ISA and OpenBLAS's core type, set in the environment the way a
CPU's own choice would set them; the pin overrides both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl import numerics
from tests.integration.conftest import write_config

# A: MKL capped below AVX2 (as on a CPU where MKL will not run its Intel-only AVX2 branch: AMD's) and
# ATen's unvectorised kernels, which every x86-64 CPU runs (an `avx512` path would crash with SIGILL on a
# CPU without AVX-512) and OpenBLAS on its SSE3 kernels (Prescott) rather than the ones it picks itself;
# B: the CPU's own choice.
PATHS = {
    "A": {
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ATEN_CPU_CAPABILITY": "default",
        "OPENBLAS_CORETYPE": "Prescott",
    },
    "B": {},
}
# the tiers train on real tokens only: the pin must hold for the packed forward and its attention
SHORT = {"sft.steps": 60, "schedule.steps": 2, "task.n_train": 40, "schedule.remove_padding": True}
RUN = "grpo/tiny/fp8/tensorwise/seed0"
TIME_KEYS = ("time/", "tok_per_s")


def _fp8rl(args: list[str], env: dict[str, str]) -> None:
    cmd = [sys.executable, "-m", "fp8rl.cli", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _sft_and_rl(root: Path, mode: str, path: str) -> tuple[bytes, list[dict]]:
    """(the base model's weights, the RL run's metrics rows without timings) of one short run."""
    root.mkdir(parents=True)
    config = write_config(root / "config.yaml", {**SHORT, "numerics": mode})
    env = {k: v for k, v in os.environ.items() if k not in (numerics.ENV_MODE, *numerics.PINNED_ENV)}
    env.update(PATHS[path], **{numerics.ENV_MODE: mode})
    c = ["--config", str(config)]
    _fp8rl(["data", *c, "--out", str(root / "data")], env)
    _fp8rl(
        [
            "sft",
            *c,
            "--model",
            "tiny",
            "--data",
            str(root / "data"),
            "--out",
            str(root / "base"),
            "--no-progress",
        ],
        env,
    )
    out = root / "run"
    _fp8rl(["train", *c, "--run", RUN, "--base", str(root / "base"), "--data", str(root / "data"),
            "--out", str(out), "--no-progress"], env)  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in r.items() if not k.startswith(TIME_KEYS)} for r in rows]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["provenance"]["numerics"]["mode"] == mode
    return (root / "base" / "model.safetensors").read_bytes(), rows


@pytest.mark.slow
def test_pinned_runs_agree_across_kernel_paths_and_fast_ones_do_not(tmp_path):
    base_a, rows_a = _sft_and_rl(tmp_path / "pin_A", "reproducible", "A")
    base_b, rows_b = _sft_and_rl(tmp_path / "pin_B", "reproducible", "B")
    assert base_a == base_b
    assert rows_a == rows_b
    fast_a, frows_a = _sft_and_rl(tmp_path / "fast_A", "fast", "A")
    fast_b, frows_b = _sft_and_rl(tmp_path / "fast_B", "fast", "B")
    assert fast_a != fast_b and frows_a != frows_b  # without the pin the two paths part ways


def test_a_command_restarts_itself_in_the_configs_mode(tmp_path):
    """`numerics: fast` in a config, run from a process in the default (pinned) mode: the command
    restarts in `fast` instead of running pinned or failing."""
    config = write_config(tmp_path / "config.yaml", {**SHORT, "numerics": "fast", "sft.steps": 0})
    env = {k: v for k, v in os.environ.items() if k != numerics.ENV_MODE}
    _fp8rl(["data", "--config", str(config), "--out", str(tmp_path / "data")], env)
    _fp8rl(["sft", "--config", str(config), "--model", "tiny", "--data", str(tmp_path / "data"),
            "--out", str(tmp_path / "base"), "--no-progress"], env)  # fmt: skip
    sft = json.loads((tmp_path / "base" / "sft.json").read_text())
    assert sft["provenance"]["numerics"]["mode"] == "fast"
    assert sft["provenance"]["numerics"]["env"]["MKL_CBWR"] is None
