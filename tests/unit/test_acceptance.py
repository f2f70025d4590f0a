"""A testbed's acceptance read off its bf16 runs (fp8rl.report.acceptance, the config's `acceptance` section)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.config_loader import load_config
from fp8rl.report.acceptance import check_acceptance, main

ROOT = Path(__file__).resolve().parents[2]


def _heldout(path: Path, value: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"suite": "heldout", "results": [{"task": "heldout", "metric": "sampled_reward", "value": value,
                                            "stderr": 0.01, "n": 2048}]}  # fmt: skip
    path.write_text(json.dumps(doc))


def _tier(tmp_path: Path, rises, *, entropy=0.5, divergence=None, finished=True):
    cfg = load_config(ROOT / "config" / "longform.yaml", [f"results_dir={tmp_path}"])
    tier = tmp_path / cfg.tier
    for seed, rise in enumerate(rises):
        run = tier / "runs" / f"grpo/story/bf16/none/seed{seed}"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "entropy": entropy, "resp_len/mean": 60.0}) + "\n"
        )
        if finished:
            (run / "summary.json").write_text(json.dumps({"status": "ok", "divergence": divergence}))
        _heldout(tier / "base" / f"story/seed{seed}" / "eval" / "heldout.json", 0.3)
        if rise is not None:
            _heldout(run / "eval" / "heldout.json", 0.3 + rise)
    return cfg


def test_four_bases_that_learn_are_accepted(tmp_path):
    result = check_acceptance(_tier(tmp_path, [0.2, 0.25, 0.18, 0.22]))
    assert result["missed"] == []
    assert result["bases"] == 4 and result["mean_rise"] == pytest.approx(0.2125)
    assert 0 < result["interval"][0] < 0.2125 < result["interval"][1]


@pytest.mark.parametrize(
    ("kw", "rises", "missed"),
    [
        ({}, [0.2, 0.25, 0.18], r"bases with a held-out rise: 3 < acceptance.min_bases 4"),
        ({}, [0.05, 0.1, 0.12, 0.1], r"mean rise 0.09\d < acceptance.min_rise 0.15"),
        ({}, [0.9, -0.3, 0.5, -0.4], r"interval of the rise starts at -0\.\d+, not above 0"),
        ({"entropy": 0.1}, [0.2] * 4, r"seed0: entropy at step 1 0.1 < 0.3"),
        (
            {"divergence": {"kind": "gibberish", "step": 40}},
            [0.2] * 4,
            r"seed3: flagged \(gibberish at step 40\)",
        ),
        ({"finished": False}, [0.2] * 4, r"seed1: not finished"),
        ({}, [0.2, 0.2, 0.2, None], r"bases with a held-out rise: 3"),
    ],
)
def test_each_missed_criterion_is_named(tmp_path, kw, rises, missed):
    import re

    result = check_acceptance(_tier(tmp_path, rises, **kw))
    assert any(re.search(missed, m) for m in result["missed"]), result["missed"]


def test_the_command_exits_1_on_a_miss_and_2_without_the_section(tmp_path, capsys):
    cfg_path = tmp_path / "c.yaml"
    text = (
        (ROOT / "config" / "longform.yaml")
        .read_text()
        .replace("results_dir: results", f"results_dir: {tmp_path}")
    )
    cfg_path.write_text(text)
    assert main(["--config", str(cfg_path)]) == 1
    assert json.loads(capsys.readouterr().out)["bases"] == 0
    (tmp_path / "none.yaml").write_text(text.split("\nacceptance:")[0])
    assert main(["--config", str(tmp_path / "none.yaml")]) == 2
