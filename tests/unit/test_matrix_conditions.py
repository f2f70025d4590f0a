"""Study tiers repeat every fp8 run under named FP8 conditions; the condition is part of the run id."""

from pathlib import Path

import pytest

from fp8rl.config.runs import RunSpec, expand_matrix, find_run, reference_run
from fp8rl.config_loader import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = (
    "[{name: s2, fp8: {noise_scale: 2.0}},"
    " {name: e5m2, fp8: {format: e5m2, kv_cache: false}, granularities: [tensorwise, delayed]}]"
)


def _cfg(*extra):
    return load_config(
        ROOT / "config/ci.yaml",
        [
            f"matrix.conditions={CONDITIONS}",
            "matrix.variants=[bf16,fp8,fp8_calib]",
            "matrix.seeds=[0,1]",
            *extra,
        ],
    )


def test_each_fp8_run_is_repeated_per_condition_and_bf16_runs_have_none():
    cfg = _cfg()
    runs = expand_matrix(cfg)
    assert len(runs) == 2 * (1 + 2 * 2)  # seeds x (bf16 + 2 fp8 variants x 2 conditions)
    ids = {r.run_id for r in runs}
    assert "grpo/tiny/bf16/none/none/seed0" in ids and "grpo/tiny/fp8/tensorwise/s2/seed1" in ids
    for r in runs:
        assert RunSpec.parse(r.run_id) == r and find_run(cfg, r.run_id) == r
    spec = find_run(cfg, "grpo/tiny/fp8_calib/tensorwise/e5m2/seed1")
    assert reference_run(spec).run_id == "grpo/tiny/bf16/none/none/seed1"
    assert [r.condition for r in expand_matrix(cfg, condition=["s2"])] == ["s2"] * 4
    # a condition limited to some granularities: e5m2 only where the recipe's format applies
    both = _cfg("matrix.granularities=[tensorwise,blockwise]")
    conds = {(r.granularity, r.condition) for r in expand_matrix(both) if r.spec.fp8}
    assert conds == {("tensorwise", "s2"), ("tensorwise", "e5m2"), ("blockwise", "s2")}


def test_a_condition_overrides_the_fp8_section_and_the_digest():
    cfg = _cfg()
    assert cfg.fp8_for("s2").noise_scale == 2.0 and cfg.fp8_for("s2").format == cfg.fp8.format
    assert cfg.fp8_for("e5m2").format == "e5m2" and not cfg.fp8_for("e5m2").kv_cache
    assert cfg.fp8_for(None) == cfg.fp8 == cfg.fp8_for("none")
    digests = {cfg.section_digest("fp8", condition=c) for c in (None, "s2", "e5m2")}
    assert len(digests) == 3


def test_runs_without_conditions_keep_the_five_part_id():
    cfg = load_config(ROOT / "config/ci.yaml")
    assert all(r.condition is None and r.run_id.count("/") == 4 for r in expand_matrix(cfg))
    with pytest.raises(ValueError, match="not in the matrix"):
        find_run(cfg, "grpo/tiny/fp8_calib/tensorwise/s2/seed0")


@pytest.mark.parametrize(
    ("conditions", "match"),
    [
        ("[{name: a, fp8: {noise_scal: 2}}]", "noise_scal"),
        ("[{name: a, fp8: {noise_scale: 0}}]", "noise_scale"),
        ("[{name: none, fp8: {noise_scale: 2}}]", "reserved"),
        ("[{name: a, fp8: {noise_scale: 2}}, {name: a, fp8: {format: e5m2}}]", "duplicate"),
        ("[{name: 'a b', fp8: {noise_scale: 2}}]", "name"),
        ("[{name: a, fp8: {noise_scale: 2}, seeds: [7]}]", "seeds"),
        ("[{name: a, fp8: {noise_scale: 2}, granularities: [mxfp8]}]", "none of which"),
    ],
)
def test_bad_conditions_name_the_key(conditions, match):
    with pytest.raises(ConfigError, match=match) as err:
        load_config(ROOT / "config/ci.yaml", [f"matrix.conditions={conditions}"])
    assert "matrix" in str(err.value) and "conditions" in str(err.value)
