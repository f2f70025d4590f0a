"""docs/studies.md's YAML snippets, merged into the smoke config, are a valid config that does what the
text says: a calib override on one condition, 3 bases x 3 seeds, a base-unit study with a paired test."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fp8rl.config import find_run, resolve_run
from fp8rl.config_loader import load_config

REPO = Path(__file__).resolve().parents[2]


def _merge(into: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def test_the_snippets_make_the_config_the_text_describes(tmp_path):
    text = (REPO / "docs" / "studies.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    raw = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    raw["matrix"]["algorithms"] = ["grpo"]
    for block in blocks:
        _merge(raw, yaml.safe_load(block))
    path = tmp_path / "studies.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_config(path)
    assert cfg.study.unit == "base" and cfg.study.test == "paired_t"
    fixed = resolve_run(cfg, find_run(cfg, "grpo/tiny/fp8_tis_calib/tensorwise/s4_fixed/seed4"))
    assert fixed.calib.upper == "fixed" and cfg.calib.upper == "proportional"
    assert cfg.base_of("tiny", 4) == "tiny/seed1"
    assert len({cfg.base_of("tiny", s) for s in cfg.matrix.seeds}) == 3
