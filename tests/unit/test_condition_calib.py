"""A matrix condition may override `calib` for its calibrated runs: resolved per run, part of exactly
those runs' digests, checked with errors that name the key; configs without it keep their digests."""

from pathlib import Path

import pytest

from fp8rl.config import TRAIN_SECTIONS, find_run, resolve_run
from fp8rl.config_loader import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = (
    "[{name: s4, fp8: {noise_scale: 4.0}},"
    " {name: s4_fixed, fp8: {noise_scale: 4.0}, calib: {upper: fixed}, variants: [fp8_tis_calib]}]"
)


def _cfg(conditions=CONDITIONS, *extra):
    return load_config(
        ROOT / "config/ci.yaml",
        [
            f"matrix.conditions={conditions}",
            "matrix.variants=[bf16,fp8,fp8_tis,fp8_tis_calib]",
            "matrix.seeds=[0,1]",
            *extra,
        ],
    )


def test_the_override_reaches_only_its_condition_calibrated_runs():
    cfg = _cfg()
    assert cfg.calib.upper == "proportional"
    assert cfg.calib_for("s4_fixed").upper == "fixed"
    # the rest of the section is the tier's
    assert cfg.calib_for("s4_fixed").model_dump(exclude={"upper"}) == cfg.calib.model_dump(exclude={"upper"})
    assert cfg.calib_for("s4") == cfg.calib == cfg.calib_for(None) == cfg.calib_for("none")
    fixed = resolve_run(cfg, find_run(cfg, "grpo/tiny/fp8_tis_calib/tensorwise/s4_fixed/seed0"))
    prop = resolve_run(cfg, find_run(cfg, "grpo/tiny/fp8_tis_calib/tensorwise/s4/seed0"))
    assert fixed.calib.upper == "fixed" and prop.calib.upper == "proportional"
    assert fixed.fp8 == prop.fp8  # same FP8 settings: the two arms differ in the upper bound only
    # s4_fixed runs fp8_tis_calib only
    assert {r.variant for r in cfg.runs() if r.condition == "s4_fixed"} == {"fp8_tis_calib"}
    with pytest.raises(KeyError):
        cfg.calib_for("nope")


def test_the_override_enters_the_digest_of_calibrated_runs_only():
    cfg = _cfg()
    fixed = resolve_run(cfg, find_run(cfg, "grpo/tiny/fp8_tis_calib/tensorwise/s4_fixed/seed0"))
    prop = resolve_run(cfg, find_run(cfg, "grpo/tiny/fp8_tis_calib/tensorwise/s4/seed0"))
    assert fixed.train_digest != prop.train_digest
    # the same condition without its calib override: every run's digest is what it was without it
    bare = _cfg(
        "[{name: s4, fp8: {noise_scale: 4.0}}, {name: s4_fixed, fp8: {noise_scale: 4.0}, variants: [fp8_tis_calib]}]"
    )
    for run in bare.runs():
        before = resolve_run(bare, run).train_digest
        after = resolve_run(cfg, run).train_digest
        assert (before != after) == (run.condition == "s4_fixed" and run.spec.calib), run.run_id
    # a non-calibrated variant under a calib-overriding condition does not move with the override
    wide = _cfg("[{name: c, fp8: {noise_scale: 4.0}, calib: {upper: fixed}}]")
    narrow = _cfg("[{name: c, fp8: {noise_scale: 4.0}}]")
    for variant in ("fp8", "fp8_tis"):
        run = f"grpo/tiny/{variant}/tensorwise/c/seed1"
        assert (
            resolve_run(wide, find_run(wide, run)).train_digest
            == resolve_run(narrow, find_run(narrow, run)).train_digest
        )
    assert wide.section_digest(*TRAIN_SECTIONS, model="tiny", condition="c") != narrow.section_digest(
        *TRAIN_SECTIONS, model="tiny", condition="c"
    )  # no variant named: the override counts (conservative)


def test_an_empty_override_keeps_the_dump_and_digest():
    """A config written before `calib` overrides existed keeps its whole-config digest."""
    cfg = _cfg("[{name: s4, fp8: {noise_scale: 4.0}}]")
    assert "calib" not in cfg.model_dump()["matrix"]["conditions"][0]
    assert "calib" in _cfg().model_dump()["matrix"]["conditions"][1]


@pytest.mark.parametrize(
    ("conditions", "match"),
    [
        ("[{name: a, calib: {uper: fixed}, variants: [fp8_tis_calib]}]", r"calib\.uper: unknown key"),
        ("[{name: a, calib: {upper: sideways}, variants: [fp8_tis_calib]}]", r"calib\.upper"),
        ("[{name: a, calib: {low_range: [0.9, 0.1]}, variants: [fp8_tis_calib]}]", r"calib\.low_range"),
        (
            "[{name: a, fp8: {noise_scale: 2}, calib: {upper: fixed}, variants: [fp8, fp8_tis]}]",
            "none of its variants",
        ),
        ("[{name: a}]", "neither"),
        # valid key by key, but not with the tier's section: static reference with a quantile upper bound
        ("[{name: a, calib: {reference: 'static:0.05'}, variants: [fp8_tis_calib]}]", "static"),
    ],
)
def test_bad_calib_overrides_name_the_key(conditions, match):
    extra = ["calib.upper=quantile"] if "static" in conditions else []
    with pytest.raises(ConfigError, match=match) as err:
        _cfg(conditions, *extra)
    assert "conditions" in str(err.value)


def test_a_calib_override_without_calibrated_variants_in_the_matrix_is_refused():
    with pytest.raises(ConfigError, match="none of its variants"):
        load_config(
            ROOT / "config/ci.yaml",
            ["matrix.conditions=[{name: a, calib: {upper: fixed}}]", "matrix.variants=[bf16,fp8,fp8_tis]"],
        )
