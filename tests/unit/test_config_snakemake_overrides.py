"""Snakemake's `--config` entries become `fp8rl --set`-style overrides (config_loader.snakemake_overrides):
the DAG takes fp8rl's dotted keys through `set=`, top-level keys and YAML mappings as Snakemake reads
them, and a wrong key or value is a ConfigError naming the `--config` entry, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fp8rl.config_loader import ConfigError, snakemake_overrides, validate_config

SMOKE = Path(__file__).resolve().parents[2] / "config" / "smoke.yaml"


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ({"set": "eval.limit=20"}, ["eval.limit=20"]),
        ({"set": "eval.limit=20 'matrix.seeds=[0, 1]'"}, ["eval.limit=20", "matrix.seeds=[0, 1]"]),
        ({"set": ["eval.limit=20", "schedule.steps=3"]}, ["eval.limit=20", "schedule.steps=3"]),
        ({"set": {"eval.limit": "20"}}, ["eval.limit=20"]),
        # Snakemake's YAML reading of a mapping value leaves every scalar a string: typed again here
        ({"eval": {"limit": "20"}}, ["eval.limit=20"]),
        ({"matrix": {"seeds": ["0", "1"]}}, ["matrix.seeds=[0, 1]"]),
        ({"results_dir": "/tmp/out"}, ["results_dir=/tmp/out"]),
        # a string YAML would read otherwise stays the string Snakemake gave
        ({"results_dir": "/tmp/a #b"}, ["results_dir='/tmp/a #b'"]),
        ({"tracking": {"wandb": "True"}}, ["tracking.wandb=true"]),
    ],
)  # fmt: skip
def test_entries_become_dotted_overrides(entries, expected):
    assert snakemake_overrides(entries) == expected


@pytest.mark.parametrize("value", ["oops", "=3", ["eval.limit"], 5, "'unbalanced"])
def test_a_set_entry_that_is_not_key_value_is_refused_naming_it(value):
    with pytest.raises(ConfigError, match=r"set="):
        snakemake_overrides({"set": value})


def _validate(entries):
    data = yaml.safe_load(SMOKE.read_text())
    return validate_config(data, overrides=snakemake_overrides(entries), override_flag="--config")


def test_overrides_reach_the_validated_config():
    cfg = _validate({"set": "eval.limit=20 schedule.steps=3", "tier": "smoke"})
    assert (cfg.eval.limit, cfg.schedule.steps, cfg.tier) == (20, 3, "smoke")
    assert _validate({"eval": {"limit": "7"}}).eval.limit == 7


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ({"set": "eval.limt=20"}, "--config eval.limt=20: eval.limt: unknown key"),
        ({"eval": {"limit": "0"}}, "--config eval.limit=0: eval.limit:"),
        ({"evl": "3"}, "--config evl=3: evl: unknown key"),
    ],
)
def test_a_bad_key_or_value_names_its_config_entry(entries, named):
    with pytest.raises(ConfigError) as exc:
        _validate(entries)
    assert named in str(exc.value)
