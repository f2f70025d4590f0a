"""SUMMARY.md's final-reward finding for tiers without a study: a list for a few cells, a table with one
row per FP8 setting and a column per variant for many, read from the tier's published comparison.csv."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from fp8rl.report.summary_page import MAX_LISTED_REWARDS, _rewards

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"


def _cells(lines: list[str]) -> dict[tuple[str, ...], dict[str, str]]:
    rows = [line for line in lines if line.startswith("| ")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    out = {}
    for row in rows[1:]:
        vals = [c.strip() for c in row.strip("|").split("|")]
        n_keys = head.index("bf16")
        key = tuple(vals[:n_keys])
        assert key not in out, f"row {key} appears twice"
        out[key] = dict(zip(head[n_keys:], vals[n_keys:], strict=True))
    return out


def test_many_cells_become_a_table_one_row_per_setting_matching_the_comparison():
    comp = pd.read_csv(PUBLISHED / "mechanism" / "tables" / "comparison.csv")
    assert len(comp) > MAX_LISTED_REWARDS
    cells = _cells(_rewards(comp))
    fp8 = comp[comp["variant"] == "fp8"]
    # every FP8 setting the tier ran has its row, with each variant's value as the comparison gives it
    assert set(cells) == set(zip(fp8["granularity"], fp8["condition"], strict=True))
    for r in comp.to_dict("records"):
        key = (r["granularity"], r["condition"])
        if key in cells and cells[key][r["variant"]]:
            assert float(cells[key][r["variant"]]) == pytest.approx(r["final_reward"], abs=5e-4)
    assert all(v for row in cells.values() for k, v in row.items() if k in ("bf16", "fp8"))


@pytest.mark.parametrize("tier", ["ci", "smoke"])
def test_few_cells_stay_a_list_named_by_algorithm_and_variant(tier):
    comp = pd.read_csv(PUBLISHED / tier / "tables" / "comparison.csv")
    (line,) = _rewards(comp)
    named = dict(re.findall(r"([a-z0-9_/]+) (\d\.\d{3})", line))
    assert len(named) == len(comp)  # no two cells share a name
    for r in comp.to_dict("records"):
        assert float(named[f"{r['algo']}/{r['variant']}"]) == pytest.approx(r["final_reward"], abs=5e-4)


def test_bf16_of_a_conditions_matrix_is_named_without_its_blank_condition():
    """A conditions matrix writes bf16's condition blank (read back as NaN): the cell is `grpo/bf16`,
    never `grpo/nan/bf16` (the longform tier's acceptance report, bf16 runs only)."""
    comp = pd.DataFrame(
        {"algo": ["grpo", "grpo"], "model": ["story"] * 2, "granularity": ["none", "tensorwise"],
         "condition": [None, "kl1e-1"], "variant": ["bf16", "fp8_tis"], "final_reward": [0.559, 0.4]}
    )  # fmt: skip
    (line,) = _rewards(comp)
    assert "grpo/bf16 0.559" in line and "grpo/kl1e-1/fp8_tis 0.400" in line and "nan" not in line
