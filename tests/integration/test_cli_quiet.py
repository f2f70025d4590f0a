"""The `fp8rl` command as a user runs it: `--version`, a clean stderr, and `sft.steps: 0`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from fp8rl.cli import main
from fp8rl.quiet import SILENCED
from tests.integration.conftest import write_config

# Lines third-party imports used to print at the top of every command (fp8rl.quiet drops them).
NOISE = ("Failed to load", "register_constant", "_pytree.py")


def fp8rl(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_version_prints_the_package_metadata_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"fp8rl {version('fp8rl')}"


def test_sft_with_zero_steps_saves_the_random_init_model_and_stderr_is_clean(tmp_path):
    config = write_config(tmp_path / "config.yaml", {"sft.steps": 0, "task.n_train": 20, "task.n_test": 4})
    data = fp8rl("data", "--config", str(config), "--out", "data", cwd=tmp_path)
    assert data.returncode == 0, data.stderr
    sft = fp8rl("sft", "--config", str(config), "--model", "tiny", "--data", "data", "--out", "base",
                "--no-progress", cwd=tmp_path)  # fmt: skip
    assert sft.returncode == 0, sft.stderr
    assert "no SFT steps (random init)" in sft.stdout
    info = json.loads((tmp_path / "base" / "sft.json").read_text())
    assert info["steps"] == 0 and info["loss/final"] is None
    assert (tmp_path / "base" / "config.json").is_file()
    # The command imported transformers (hence torchao), yet none of their import-time noise is printed.
    noisy = [line for line in sft.stderr.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, noisy


def test_the_filters_drop_only_the_known_messages():
    import logging

    from fp8rl import quiet

    quiet.install()
    quiet.install()  # idempotent
    for name, _ in SILENCED:
        assert len(logging.getLogger(name).filters) == 1
    ao = logging.getLogger("torchao")
    drop = logging.LogRecord(
        "torchao", logging.WARNING, "f", 1, "Failed to load /x/_C_mxfp8.so: nope", (), None
    )
    keep = logging.LogRecord("torchao", logging.WARNING, "f", 1, "Failed to quantize layer 3", (), None)
    assert not ao.filters[0].filter(drop) and ao.filters[0].filter(keep)
