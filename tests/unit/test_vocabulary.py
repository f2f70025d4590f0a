"""The vocabulary is defined once and the config, the matrix and the DAG read it from there; the
calibration reference is parsed once into a typed value that dumps back to its config spelling."""

import re
import subprocess
from pathlib import Path

import pytest

from fp8rl.config import CalibConfig, MatrixConfig
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.vocabulary import GRANULARITIES, NO_GRANULARITY, VARIANT_SPECS, VARIANTS, CalibReference

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "mode", "q"),
    [("shadow", "shadow", None), ("run", "run", None), ("static:0.015", "static", 0.015)],
)
def test_calib_reference_parses_once_and_round_trips(text, mode, q):
    ref = CalibReference.parse(text)
    assert (ref.mode, ref.q) == (mode, q) and str(ref) == text
    cfg = CalibConfig(reference=text)
    assert cfg.reference == ref
    assert cfg.model_dump(mode="json")["reference"] == text  # the resolved YAML keeps the spelling
    assert CalibConfig.model_validate(cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("bad", ["bf16", "static:", "static:1.0", "static:-0.1", "static:x", ""])
def test_calib_reference_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="'shadow', 'run' or 'static:<q>'"):
        CalibReference.parse(bad)


def test_bad_reference_in_a_config_names_the_key(tmp_path):
    text = (ROOT / "config/ci.yaml").read_text().replace("reference: shadow", "reference: static:2")
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"calib\.reference"):
        load_config(tmp_path / "c.yaml")


def test_bf16_granularity_comes_from_the_variant_spec():
    m = MatrixConfig(algorithms=["grpo"], models=["m"], variants=list(VARIANTS), seeds=[0])
    for v in VARIANTS:
        want = list(GRANULARITIES[:1]) if VARIANT_SPECS[v].fp8 else [NO_GRANULARITY]
        assert m.granularities_for(v) == want


def test_each_vocabulary_tuple_is_defined_once():
    """`git grep` finds one definition of each vocabulary tuple in the package and the workflows."""
    names = ["ALGORITHMS", "VARIANTS", "GRANULARITIES", "LOSS_AGG_MODES", "KL_TYPES", "TIS_LEVELS"]
    names += ["CALIB_POPULATIONS", "CALIB_UPPER_MODES", "RECIPE_FORMATS", "AMAX_ALGOS", "VARIANT_SPECS"]
    out = subprocess.run(
        ["git", "grep", "-nE", r"^\s*(" + "|".join(names) + r")\s*=", "--", "fp8rl", "workflows", "Snakefile"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    defined = [re.match(r"^[^:]+:\d+:\s*(\w+)", line).group(1) for line in out.splitlines()]
    assert sorted(defined) == sorted(names), out
    assert all(line.startswith("fp8rl/vocabulary.py:") for line in out.splitlines()), out
