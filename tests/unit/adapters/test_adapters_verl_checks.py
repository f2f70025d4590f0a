"""The verl backend's capability checks in one place: a run's FP8 settings come from its
condition, and whatever the verl backend would refuse, `fp8rl config validate` and the Snakefile's
validation refuse first, with the same message."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.adapters.verl_model import AdapterError
from fp8rl.adapters.verl_overrides import VerlPaths, deviations, verl_overrides
from fp8rl.adapters.verl_support import check_verl_support, verl_problems
from fp8rl.cli import main
from fp8rl.commands.config import CONFIG_CHECKS
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"
PATHS = VerlPaths("/m", "/d/train.parquet", "/d/test.parquet", "/out")
TE = "+actor_rollout_ref.actor.megatron.override_transformer_config"


def _ov(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_overrides_use_the_runs_condition():
    cfg = load_config(PAPER, ["matrix.conditions=[{name: c, fp8: {format: e4m3, kv_cache: true}}]"])
    spec = next(r for r in cfg.runs() if r.variant == "fp8" and r.granularity == "tensorwise")
    assert spec.condition == "c" and "/c/" in spec.run_id
    ov = _ov(verl_overrides(cfg, spec, PATHS))
    assert ov[f"{TE}.fp8"] == "e4m3"  # the condition's format, not the tier's hybrid
    assert ov["+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype"] == "fp8"
    assert not any("not fp8.format" in d for d in deviations(cfg, spec))  # e4m3 rollout = asked for
    # the same config without the condition: the tier's settings
    plain = load_config(PAPER)
    ov = _ov(verl_overrides(plain, RunSpec("grpo", "qwen3-8b", "fp8", "tensorwise", 0), PATHS))
    assert ov[f"{TE}.fp8"] == "hybrid"
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype" not in ov


def test_a_conditions_refusal_names_the_condition_key():
    cfg = load_config(PAPER, ["matrix.conditions=[{name: c, fp8: {format: e5m2}}]"])
    spec = next(r for r in cfg.runs() if r.variant == "fp8" and r.granularity == "tensorwise")
    with pytest.raises(AdapterError, match="fp8.format") as exc:
        check_verl_support(cfg, spec)
    assert exc.value.key == ("matrix", "conditions", 0, "fp8", "format")
    # the problem is named by the override that set it, not by a line of the file
    override = re.escape("--set matrix.conditions=[{name: c, fp8: {format: e5m2}}]: ")
    with pytest.raises(ConfigError, match=override + r"matrix\.conditions\.0\.fp8\.format: 'e5m2'"):
        load_config(PAPER, ["matrix.conditions=[{name: c, fp8: {format: e5m2}}]"], checks=CONFIG_CHECKS)


@pytest.mark.parametrize(
    "override, needle",
    [
        ("fp8.format=e5m2", "fp8.format: 'e5m2' is not a Megatron FP8 format"),
        ("fp8.noise_scale=2.0", "fp8.noise_scale: the noise dose"),
        ("matrix.granularities=[rowwise]", "matrix.granularities: 'rowwise'"),
        ("calib.reference=shadow", "calib.reference: 'shadow'"),
        ("schedule.sampler_draw=inverse_cdf", "schedule.sampler_draw: 'inverse_cdf' is the reference"),
        ("schedule.keep_every=50", "schedule.keep_every: the checkpoint history"),
    ],
)
def test_config_validate_refuses_what_verl_refuses(override, needle, capsys):
    assert main(["config", "validate", str(PAPER), "--set", override]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    # and the adapter agrees, run by run: every run validation lets through, verl accepts
    cfg = load_config(PAPER, [override])
    problems = verl_problems(cfg)
    assert problems
    refused = [s for s in cfg.runs() if _refused(cfg, s)]
    assert refused


def _refused(cfg, spec) -> bool:
    try:
        check_verl_support(cfg, spec)
    except AdapterError:
        return True
    return False


def test_every_run_of_a_valid_config_is_accepted_by_the_adapter():
    cfg = load_config(PAPER, checks=CONFIG_CHECKS)
    assert verl_problems(cfg) == []
    for spec in cfg.runs():
        check_verl_support(cfg, spec)
        verl_overrides(cfg, spec, PATHS)


def test_the_snakefile_refuses_e5m2_before_any_job(tmp_path):
    """The DAG's validation runs the same checks: exit 2 with the CLI's message, nothing planned."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n", "--directory", str(ROOT),
           "--configfile", str(PAPER), "--config", f"results_dir={tmp_path}", "fp8={format: e5m2}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "fp8.format: 'e5m2' is not a Megatron FP8 format" in proc.stderr
    assert "Traceback" not in proc.stderr
