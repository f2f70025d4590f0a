"""SUMMARY.md's caveat that FP8 was emulated on CPU on a small model stands where a run recorded emulated
execution (every published tier), and not where every run that recorded it ran on hardware (the paper
tier's verl runs: FP8 through Transformer Engine and vLLM on GPUs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fp8rl.config_loader import load_config
from fp8rl.report.summary_page import summary_page

ROOT = Path(__file__).resolve().parents[3]
EMULATED = "FP8 is emulated on CPU on a small model"


def _page(tmp_path: Path, config: str, execution: list[str]) -> str:
    cfg = load_config(ROOT / "config" / config)
    runs = [s.run_id for s in cfg.runs()][: len(execution)]
    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame(
        {"run_id": runs, "status": ["ok" if e else "missing" for e in execution], "reason": "", "step": "",
         "steps_planned": "", "malformed_lines": 0, "execution": execution}
    ).to_csv(tables / "runs.csv", index=False)  # fmt: skip
    return summary_page(cfg, tables, void=False, numerics={})


def test_verl_runs_on_hardware_are_not_said_to_be_emulated(tmp_path):
    page = _page(tmp_path, "paper.yaml", ["hardware", "hardware", ""])
    assert "## What it does not show" in page
    assert EMULATED not in page


@pytest.mark.parametrize(
    ("config", "execution"),
    [
        ("smoke.yaml", ["emulated", "emulated"]),
        ("paper.yaml", ["hardware", "emulated"]),
        ("smoke.yaml", ["", ""]),
    ],
)
def test_emulated_runs_or_a_reference_tier_without_a_record_keep_the_caveat(tmp_path, config, execution):
    assert EMULATED in _page(tmp_path, config, execution)


def test_runs_at_a_searched_noise_scale_carry_the_noise_multiplier_caveat(tmp_path):
    """The longform failure search's FP8 runs train under a noise scale searched for a target KL, so the
    page says the multiplier does not stand in for larger models; its bf16-only acceptance run does not."""
    assert "noise multiplier" in _page(tmp_path, "longform.yaml", ["emulated"] * 4)
    cfg = load_config(
        ROOT / "config" / "longform.yaml", ["matrix.variants=[bf16]", "study=null", "failure_search=null"]
    )
    (tmp_path / "t").mkdir()
    pd.DataFrame(
        {"run_id": [s.run_id for s in cfg.runs()], "status": "ok", "reason": "", "step": "", "steps_planned": "",
         "malformed_lines": 0, "execution": "emulated"}
    ).to_csv(tmp_path / "t" / "runs.csv", index=False)  # fmt: skip
    page = summary_page(cfg, tmp_path / "t", void=False, numerics={})
    assert EMULATED in page and "noise multiplier" not in page


@pytest.mark.parametrize(
    ("config", "adjusted"),
    [("longform.yaml", "fixed-sequence-adjusted p"), ("corrections.yaml", "Holm-adjusted p")],
)
def test_the_table_guide_names_the_studys_own_p_adjustment(tmp_path, config, adjusted):
    """SUMMARY.md's guide to the planned table names how its p is adjusted: the longform failure search
    registered a fixed sequence, the corrections' comparison Holm."""
    _page(tmp_path, config, ["emulated"] * 2)  # writes tables/runs.csv
    (tmp_path / "tables" / "planned.md").write_text("| contrast |\n")
    cfg = load_config(ROOT / "config" / config)
    page = summary_page(cfg, tmp_path / "tables", void=False, numerics={})
    line = next(x for x in page.splitlines() if x.startswith("- [planned]"))
    assert adjusted in line
