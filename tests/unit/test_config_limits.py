"""What a config may ask of a machine is bounded at validation (fp8rl.config.limits): a value past its
bound names the key, the bound and how to raise it, before any work; a config raises a bound on purpose
under `limits`, and the shipped tiers are all inside theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config_loader import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "config" / "smoke.yaml"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("schedule.prompts_per_step=1000000000", "schedule.prompts_per_step: 1000000000 is above the limit 65536"),
        ("algorithms.grpo.group_size=100000000", "algorithms.grpo.group_size: 100000000 is above the limit 1024"),
        ("sft.steps=1000000000000", "sft.steps: 1000000000000 is above the limit 1000000"),
        ("resources.train.threads=100000", "resources.train.threads: 100000 is above the limit 1024"),
        ("schedule.lr=1e300", "schedule.lr: 1e+300 is above the limit 10"),
        ("tis.cap=1e308", "tis.cap: 1e+308 is above the limit 10000"),
        ("algorithms.grpo.group_size=1024", "group_size 1024 = 1048576 rollout sequences per step, above the limit 262144"),
    ],
)  # fmt: skip
def test_a_value_past_its_bound_is_refused_naming_key_and_limit(setting, named, capsys):
    overrides = [setting, "schedule.prompts_per_step=1024"] if "rollout" in named else [setting]
    with pytest.raises(ConfigError) as err:
        load_config(SMOKE, overrides)
    assert named in str(err.value) and "if you mean it" in str(err.value)
    assert main(["config", "validate", str(SMOKE), *(a for o in overrides for a in ("--set", o))]) == 2
    assert named in capsys.readouterr().err


def test_a_config_raises_a_bound_on_purpose():
    cfg = load_config(SMOKE, ["schedule.prompts_per_step=100000", "limits={schedule.prompts_per_step: 200000, "
                              "rollout_sequences: 10000000}"])  # fmt: skip
    assert cfg.schedule.prompts_per_step == 100000
    with pytest.raises(ConfigError, match="limits.prompts: unknown key; allowed keys here: schedule.prompts"):
        load_config(SMOKE, ["limits={prompts: 1}"])


def test_every_shipped_tier_is_inside_the_bounds():
    for path in sorted((REPO / "config").glob("*.yaml")):
        if path.name not in ("small_cpu.yaml", "ci_slurm.yaml"):  # overlays of small.yaml and ci.yaml
            load_config(path)


@pytest.mark.parametrize("key", ["results_dir", "hub.home"])
def test_a_path_part_no_filesystem_can_create_is_refused(key, capsys):
    """A 300-character folder name in results_dir ended in a Snakemake traceback (ENAMETOOLONG)."""
    setting = f"{key}=results/{'a' * 300}/x"
    assert main(["config", "validate", str(SMOKE), "--set", setting]) == 2
    err = capsys.readouterr().err
    assert f"{key}: the part aaaaaaaaaaaaaaaaaaaa... is" in err and "255" in err
