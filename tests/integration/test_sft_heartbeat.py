"""`fp8rl sft --no-progress` (as the DAG runs it) is not silent: a heartbeat line with step, loss,
elapsed time and ETA, the first and the last step at least (fp8rl.engine.heartbeat, SFT_FIELDS)."""

from __future__ import annotations

import re

from fp8rl.cli import main
from tests.integration.conftest import write_config


def test_sft_without_a_bar_prints_step_loss_elapsed_and_eta(tmp_path, capsys):
    config = write_config(tmp_path / "config.yaml", {"sft.steps": 3, "task.n_train": 20, "task.n_test": 4})
    assert main(["data", "--config", str(config), "--out", str(tmp_path / "data")]) == 0
    args = ["sft", "--config", str(config), "--model", "tiny", "--data", str(tmp_path / "data")]
    assert main([*args, "--out", str(tmp_path / "base"), "--no-progress"]) == 0
    beats = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[sft tiny]")]
    assert beats[0].startswith("[sft tiny] step 1/3 loss ") and beats[-1].startswith("[sft tiny] step 3/3 ")
    assert all(
        re.search(r"loss \d+\.\d{4} \d+\.\d\d s/step elapsed \d:\d\d:\d\d ETA \d:\d\d:\d\d$", b)
        for b in beats
    )
