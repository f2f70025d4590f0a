"""What a config may ask of a machine is bounded at validation (fp8rl.config.limits): a value past its
bound names the key, the bound and how to raise it, before any work; a config raises a bound on purpose
under `limits`, and the shipped tiers are all inside theirs."""

from __future__ import annotations

import re
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
        ("schedule.ppo_epochs=1000000", "schedule.ppo_epochs: 1000000 is above the limit 1000"),
        ("resources.train.mem_mb=100000000", "resources.train.mem_mb: 100000000 is above the limit 4194304"),
        ("resources.train.runtime=10000000", "resources.train.runtime: 10000000 is above the limit 43200"),
    ],
)  # fmt: skip
def test_a_value_past_its_bound_is_refused_naming_key_and_limit(setting, named, capsys):
    overrides = [setting, "schedule.prompts_per_step=1024"] if "rollout" in named else [setting]
    with pytest.raises(ConfigError) as err:
        load_config(SMOKE, overrides)
    assert named in str(err.value) and "if you mean it" in str(err.value)
    assert main(["config", "validate", str(SMOKE), *(a for o in overrides for a in ("--set", o))]) == 2
    assert named in capsys.readouterr().err


SMOKE_ARCH = (
    "{hidden_size: 128, num_layers: 2, num_heads: 4, intermediate_size: 344, max_position_embeddings: 64}"
)


@pytest.mark.parametrize(
    ("arch", "named"),
    [
        ("{hidden_size: 131072, num_layers: 2, num_heads: 4, intermediate_size: 344, max_position_embeddings: 64}",
         "arch.hidden_size: 131072 is above the limit 65536"),
        ("{hidden_size: 128, num_layers: 100000, num_heads: 4, intermediate_size: 344, max_position_embeddings: 64}",
         "arch.num_layers: 100000 is above the limit 1024"),
        ("{hidden_size: 128, num_layers: 2, num_heads: 4, intermediate_size: 100000000, max_position_embeddings: 64}",
         "arch.intermediate_size: 100000000 is above the limit 262144"),
        ("{hidden_size: 16384, num_layers: 1000, num_heads: 128, intermediate_size: 65536, max_position_embeddings: 64}",
         "about 4.29e+12 weights, above the limit 1e+10"),
    ],
)  # fmt: skip
def test_a_scratch_model_past_its_size_bound_is_refused(arch, named, tmp_path, capsys):
    """A typo in a scratch arch built a model no machine holds (an empty MemoryError at build time)."""
    cfg = tmp_path / "big.yaml"
    cfg.write_text(SMOKE.read_text().replace(SMOKE_ARCH, arch))
    assert main(["config", "validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert named in err and "if you mean it" in err and "line 12" in err


@pytest.mark.parametrize(
    ("config", "mini_batches", "named"),
    [
        (SMOKE, 100_000_000, "256 rollout sequences of a step (prompts_per_step x algorithms.grpo.group_size) "
                             "split into 256 mini-batches of 1, not 100000000"),
        (SMOKE, 200, "split into 128 mini-batches of 2, not 200"),
        (REPO / "config" / "verl_smoke.yaml", 3, "mini_batches 3 does not divide schedule.prompts_per_step 8"),
    ],
)  # fmt: skip
def test_mini_batches_the_batch_does_not_split_into_are_refused_not_clamped(config, mini_batches, named):
    """verl's mini-batch is prompts_per_step // mini_batches prompts (at least 1) and the reference
    trainer's ceil(sequences / mini_batches): 1e8 ran 256 updates, and a calibrated run's N/(N-1) over
    updates_per_step was wrong."""
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(config, [f"schedule.mini_batches={mini_batches}"])
    assert load_config(SMOKE, ["schedule.mini_batches=256"]).schedule.mini_batches == 256


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
