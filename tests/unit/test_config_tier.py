"""A config names its own tier: any path-safe folder name, no closed list; the shipped tiers are the
configs in config/ (fp8rl.config.tier_problem; refusals in tests/data/bad_configs/tier_*.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fp8rl.config import tier_problem
from fp8rl.config_loader import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = """tier: {tier}
models:
  - {{name: tiny, source: scratch}}
matrix: {{algorithms: [grpo], models: [tiny], variants: [bf16], seeds: [0]}}
"""


@pytest.mark.parametrize("name", ["my-study", "ablation_2", "Smoke.v2", "x" * 64])
def test_a_config_may_name_its_own_tier(tmp_path, name):
    path = tmp_path / "own.yaml"
    path.write_text(MINIMAL.format(tier=name))
    assert load_config(path).tier == name


@pytest.mark.parametrize(
    "name", ["", "my study", "../up", "a/b", ".hidden", "-x", "x" * 65, "published", "$(id)"]
)
def test_a_tier_that_is_not_one_folder_name_is_refused_naming_the_key(tmp_path, name):
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL.format(tier=repr(name)))
    with pytest.raises(ConfigError, match=r"tier: .*tier") as exc:
        load_config(path)
    assert "line 1" in str(exc.value)
    assert tier_problem(name) is not None


def test_every_shipped_config_names_a_tier_and_none_is_a_closed_list():
    import fp8rl.vocabulary as vocabulary

    assert not hasattr(vocabulary, "TIERS")
    tiers = {}
    for path in sorted((ROOT / "config").glob("*.yaml")):
        tier = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("tier")
        if tier is None:  # an overlay (e.g. ci_slurm.yaml) on top of another config
            continue
        assert tier_problem(tier) is None, path
        tiers.setdefault(tier, []).append(path.name)
    assert {"smoke", "mechanism", "stress", "small", "paper"} <= set(tiers)
