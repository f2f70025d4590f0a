"""`sft.bases`: B per-seed bases carry several RL seeds each (seed s starts from base s % B, base b is the
base `per_seed` trains for seed b), named the same everywhere (endpoints, fp8rl train, the DAG), with the
SFT digest unchanged so existing per-seed bases are reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config import TRAIN_SECTIONS, RunSpec, find_run, resolve_run
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.engine.inputs import check_base_seed
from fp8rl.engine.sft import sft_seed
from fp8rl.report.endpoints import base_of

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "config/smoke.yaml"  # sft.per_seed: true


def _cfg(*extra):
    return load_config(SMOKE, ["matrix.seeds=[0,1,2,3,4,5]", *extra])


def test_seed_s_starts_from_base_s_mod_b():
    cfg = _cfg("sft.bases=3")
    assert [cfg.sft.base_seed(s) for s in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [cfg.base_of("tiny", s) for s in range(6)] == [f"tiny/seed{s % 3}" for s in range(6)]
    assert base_of(cfg, RunSpec("grpo", "tiny", "fp8", "tensorwise", 4)) == "tiny/seed1"
    # base b is exactly per_seed's base for seed b: same name, same SFT seed
    per_seed = _cfg()
    for b in range(3):
        assert per_seed.base_of("tiny", b) == cfg.base_of("tiny", b)
        assert per_seed.sft.base_seed(b) == cfg.sft.base_seed(b) == b
    assert sft_seed(cfg.task.seed, cfg.sft.base_seed(4)) == sft_seed(cfg.task.seed, 1)
    # without bases: a base per seed; without per_seed: the shared base
    assert [per_seed.base_of("tiny", s) for s in (0, 5)] == ["tiny/seed0", "tiny/seed5"]
    shared = _cfg("sft.per_seed=false")
    assert shared.sft.base_seed(5) is None and shared.base_of("tiny", 5) == "tiny"


def test_bases_leave_the_sft_digest_and_are_omitted_at_their_default():
    with_bases, without = _cfg("sft.bases=3"), _cfg()
    assert "bases" not in without.model_dump()["sft"]
    assert without.digest() == load_config(SMOKE, ["matrix.seeds=[0,1,2,3,4,5]", "sft.bases=null"]).digest()
    # the base's own digest: as it always was without bases, and unchanged by them (bases reused)
    assert without.base_digest("tiny") == without.section_digest("numerics", "task", "sft", model="tiny")
    assert with_bases.base_digest("tiny") == without.base_digest("tiny")
    # a run's digest moves: seed 3 now starts from base 0
    run = find_run(with_bases, "grpo/tiny/fp8/tensorwise/seed3")
    assert resolve_run(with_bases, run).train_digest != resolve_run(without, run).train_digest
    assert with_bases.section_digest(*TRAIN_SECTIONS, model="tiny") != without.section_digest(
        *TRAIN_SECTIONS, model="tiny"
    )


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["sft.per_seed=false", "sft.bases=2"], "bases: 2 needs per_seed: true"),
        (["sft.bases=0"], "bases"),
        (["sft.bases=3", "matrix.seeds=[0,3,6]"], r"start from bases \[0\] only"),
    ],
)
def test_inconsistent_bases_are_refused_naming_the_key(extra, match):
    with pytest.raises(ConfigError, match=match) as err:
        load_config(SMOKE, extra)
    assert "sft" in str(err.value)


def _base(path: Path, seed: int | None) -> Path:
    path.mkdir(parents=True)
    info = {"model": "tiny", "seed": seed, "sft_seed": sft_seed(1234, seed)}
    (path / "sft.json").write_text(json.dumps(info))
    return path


def test_a_run_takes_its_own_base_and_records_it(tmp_path):
    cfg = _cfg("sft.bases=3")
    spec = find_run(cfg, "grpo/tiny/fp8/tensorwise/seed4")
    record = check_base_seed(cfg, spec, _base(tmp_path / "seed1", 1))
    assert record == {"name": "tiny/seed1", "seed": 1, "sft_seed": sft_seed(1234, 1)}
    with pytest.raises(ValueError, match=r"run seed 4 starts from base seed 1 \(seed 4 % sft.bases 3\)"):
        check_base_seed(cfg, spec, _base(tmp_path / "seed4", 4))
    with pytest.raises(ValueError, match="one base shared by every run"):
        check_base_seed(_cfg("sft.per_seed=false"), spec, tmp_path / "seed1")


def test_fp8rl_sft_refuses_a_seed_beyond_the_bases(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("")
    args = ["sft", "--config", str(SMOKE), "--set", "sft.bases=2", "--model", "tiny", "--data", str(data)]
    assert main([*args, "--out", str(tmp_path / "b"), "--seed", "2"]) == 2
    assert "sft.bases = 2 bases, seeds 0 .. 1" in capsys.readouterr().err
