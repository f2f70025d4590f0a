"""Config defaults, overrides, matrix expansion counts and run ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config.runs import RunSpec, expand_matrix, find_run, reference_run
from fp8rl.config_loader import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "tier": "smoke",
    "models": [{"name": "tiny", "source": "scratch"}],
    "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16"], "seeds": [0]},
}


def test_defaults_follow_the_algorithms():
    cfg = validate_config(MINIMAL)
    grpo, dapo = cfg.algorithm("grpo"), cfg.algorithm("dapo")
    assert (grpo.clip_low, grpo.clip_high, grpo.clip_c) == (0.2, 0.2, None)
    assert grpo.loss_agg_mode == "seq-mean-token-mean"
    assert (dapo.clip_low, dapo.clip_high, dapo.clip_c) == (0.2, 0.28, 3.0)
    assert dapo.loss_agg_mode == "token-mean" and dapo.dynamic_sampling
    assert cfg.model("tiny").arch is not None  # scratch models get a default architecture
    assert cfg.calib.reference.mode == "shadow" and cfg.tis.cap == 2.0
    assert cfg.fp8.gemms and cfg.fp8.optimizer_state and cfg.fp8.rollout


def test_overrides_apply_on_top_of_the_file():
    cfg = load_config(ROOT / "config/smoke.yaml", ["schedule.steps=3", "algorithms.grpo.clip_high=0.3"])
    assert cfg.schedule.steps == 3
    assert cfg.algorithm("grpo").clip_high == 0.3
    with pytest.raises(ConfigError, match="schedule.steps"):
        load_config(ROOT / "config/smoke.yaml", ["schedule.steps=-3"])
    with pytest.raises(ConfigError, match="not of the form"):
        load_config(ROOT / "config/smoke.yaml", ["schedule.steps"])


def test_smoke_matrix_counts_and_ids():
    cfg = load_config(ROOT / "config/smoke.yaml")
    runs = expand_matrix(cfg)
    # 2 algos x (bf16 + 3 fp8 variants x tensorwise) x 3 seeds
    assert len(runs) == 24
    ids = [r.run_id for r in runs]
    assert len(set(ids)) == len(ids)
    assert "grpo/tiny/bf16/none/seed0" in ids
    assert "dapo/tiny/fp8_calib/tensorwise/seed1" in ids
    assert not any("bf16/tensorwise" in i for i in ids)


def test_paper_matrix_lists_every_cell():
    cfg = load_config(ROOT / "config/paper.yaml")
    runs = expand_matrix(cfg)
    # 2 algos x 3 models x (bf16 + 4 fp8 variants x 2 granularities) x 3 seeds
    assert len(runs) == 2 * 3 * (1 + 4 * 2) * 3 == 162
    assert {r.model for r in runs} == {"qwen3-8b", "qwen3-14b", "qwen2.5-32b"}
    assert len(expand_matrix(cfg, variant=["fp8_calib"], granularity=["blockwise"])) == 2 * 3 * 3


def test_variant_granularity_override():
    data = json.loads(json.dumps(MINIMAL))
    data["matrix"].update(
        variants=["bf16", "fp8", "fp8_calib"],
        granularities=["tensorwise"],
        variant_granularities={"fp8_calib": ["tensorwise", "mxfp8"]},
    )
    runs = expand_matrix(validate_config(data))
    assert [r.granularity for r in runs if r.variant == "fp8_calib"] == ["tensorwise", "mxfp8"]
    assert len(runs) == 4


def test_run_id_round_trip_and_errors():
    spec = RunSpec("dapo", "tiny", "fp8_tis", "blockwise", 7)
    assert RunSpec.parse(spec.run_id) == spec
    assert spec.spec.fp8 and spec.spec.tis and not spec.spec.calib
    assert reference_run(spec).run_id == "dapo/tiny/bf16/none/seed7"
    for bad, word in [
        ("grpo/tiny/bf16", "form"),
        ("ppo/tiny/bf16/none/seed0", "algorithm"),
        ("grpo/tiny/fp9/none/seed0", "variant"),
        ("grpo/tiny/bf16/tensorwise/seed0", "granularity"),
        ("grpo/tiny/fp8/tensorwise/seedX", "seed"),
    ]:
        with pytest.raises(ValueError, match=word):
            RunSpec.parse(bad)
    cfg = load_config(ROOT / "config/smoke.yaml")
    assert find_run(cfg, "grpo/tiny/fp8/tensorwise/seed0").variant == "fp8"
    with pytest.raises(ValueError, match="not in the matrix"):
        find_run(cfg, "grpo/tiny/fp8/blockwise/seed0")


def test_digest_changes_with_content():
    a = validate_config(MINIMAL)
    b = validate_config(MINIMAL, overrides=["schedule.lr=0.01"])
    assert a.digest() == validate_config(MINIMAL).digest() != b.digest()


def test_remove_padding_is_off_unless_set_and_then_part_of_the_digest():
    """Training on real tokens only changes the numbers: a config that sets it is another config, and
    one written before the key existed keeps its digest (the key is left out of the dump while off)."""
    off = validate_config(MINIMAL)
    assert off.schedule.remove_padding is False and "remove_padding" not in off.model_dump()["schedule"]
    assert validate_config(MINIMAL, overrides=["schedule.remove_padding=false"]).digest() == off.digest()
    on = validate_config(MINIMAL, overrides=["schedule.remove_padding=true"])
    assert on.model_dump()["schedule"]["remove_padding"] is True and on.digest() != off.digest()


def test_cli_matrix_json_and_filters(capsys):
    assert main(["matrix", str(ROOT / "config/smoke.yaml"), "--json", "--algo", "dapo", "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 4 and all(r["algo"] == "dapo" and r["seed"] == 1 for r in out["runs"])


def test_cli_matrix_filters_by_condition(capsys):
    """A study tier's dose axis is a filter too: the stress tier's s4 dose runs fp8 and fp8_calib."""
    assert main(["matrix", str(ROOT / "config/stress.yaml"), "--json", "--condition", "s4"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs and {r["condition"] for r in runs} == {"s4"}
    assert {r["variant"] for r in runs} == {"fp8", "fp8_calib"}
    assert main(["matrix", str(ROOT / "config/stress.yaml"), "--condition", "s9"]) == 2
    assert "allowed: none, s1, s2, s4, s8" in capsys.readouterr().err


def test_cli_schema_is_the_models_schema(capsys):
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"tier", "models", "matrix", "calib"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--variant", "fp9"], "--variant fp9: 'fp9' is not a variant of the matrix"),
        (["--algo", "ppo"], "--algo ppo: 'ppo' is not an algo"),
        (["--seed", "7"], "allowed: 0, 1"),
        (["--model", "huge"], "allowed: tiny"),
        (["--granularity", "rowwise"], "allowed: none, tensorwise"),
    ],
)
def test_cli_matrix_filter_outside_the_matrix_exits_2(flags, message, capsys):
    assert main(["matrix", str(ROOT / "config/smoke.yaml"), *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "0 runs" not in captured.out


def test_sft_checks_model_positions_before_any_work(tmp_path, capsys):
    """The char model must hold the longest prompt and answer: exit 2 before data is even read."""
    bad = Path(__file__).parent.parent / "data" / "bad_configs" / "positions_below_prompt_and_answer.yaml"
    out = tmp_path / "base"
    args = ["sft", "--config", str(bad), "--model", "tiny", "--data", str(tmp_path), "--out", str(out)]
    assert main(args) == 2
    assert "max_position_embeddings" in capsys.readouterr().err
    assert not out.exists()


def test_a_published_tiers_config_keeps_the_digest_it_was_published_under():
    """A field added to the config (a Slurm account, raised limits) must not move the digest of a config
    whose results are published: the DAG's records and `fp8rl publish --config` key on it."""
    import json
    from pathlib import Path

    from fp8rl.config_loader import load_config

    repo = Path(__file__).resolve().parents[2]
    for config, published in (("config/ci.yaml", "results/published/ci"), ("config/smoke.yaml", "results/published/smoke")):  # fmt: skip
        prov = json.loads((repo / published / "provenance.json").read_text())
        assert load_config(repo / config).digest() == prov["config_digest"], config
