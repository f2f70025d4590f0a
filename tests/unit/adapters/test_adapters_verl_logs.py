"""verl's own file logger's output through the run's import (fp8rl.adapters.verl_run.finish_run)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fp8rl.adapters.verl_run import finish_run
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
TIS = RunSpec.parse("grpo/qwen3-8b/fp8_tis/tensorwise/seed1")


def _log_with_verls_file_logger(out: Path, monkeypatch, rows: list[dict]) -> Path:
    """Write one attempt's log as verl 0.9.1's `FileLogger` (`trainer.logger: [file]`) writes it."""
    from verl.utils.tracking import FileLogger

    path = out / "verl_logs" / "attempt-001.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("fp8rl", "run")
    for step, data in enumerate(rows, 1):
        logger.log(data, step)
    logger.finish()
    return path


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("actor/entropy", math.nan),
        ("critic/score/mean", math.inf),
        ("actor/grad_norm", math.nan),
        ("actor/pg_loss", -math.inf),
    ],
)
def test_a_non_finite_metric_in_verls_own_log_is_the_runs_divergence(
    verl_site, tmp_path, monkeypatch, name, value
):
    """verl's file logger serializes with orjson, which writes NaN and inf as `null`: the run is
    `diverged` at that step, not `ok`, and metrics.jsonl leaves the value out."""
    cfg = load_config(PAPER, ["schedule.steps=3"])
    out = tmp_path / "run"
    rows = [{"actor/entropy": 0.8, "critic/score/mean": 0.5, "actor/grad_norm": 1.0, "actor/pg_loss": 0.1}
            for _ in range(3)]  # fmt: skip
    rows[1][name] = value
    log = _log_with_verls_file_logger(out, monkeypatch, rows)
    assert "null" in log.read_text()  # what orjson made of it
    summary = finish_run(cfg, TIS, out, exit_code=0)
    assert summary["status"] == "diverged", summary
    assert summary["divergence"]["kind"] == "non_finite" and summary["divergence"]["step"] == 2
    assert "null" not in (out / "metrics.jsonl").read_text()
