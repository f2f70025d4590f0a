"""Whose data is it: a run directory copied into another cell, a finished run without its eval result,
and an eval result of another checkpoint than the run's are data problems, never results."""

from __future__ import annotations

import json
import shutil

import pytest
from report_fixtures import write_tier

from fp8rl.checkpoint_files import checkpoint_digest
from fp8rl.io import atomic_write_json
from fp8rl.report.comparison import comparison_table
from fp8rl.report.endpoints import endpoints_table
from fp8rl.report.load import load_tier
from fp8rl.run_files import RunDir

SEED0 = "grpo/tiny/fp8/tensorwise/seed0"
SEED1 = "grpo/tiny/fp8/tensorwise/seed1"


@pytest.fixture
def tier(tmp_path):
    cfg = write_tier(tmp_path)
    return cfg, tmp_path / "results" / cfg.tier / "runs"


def _row(rs, run_id):
    return rs.runs.set_index("run_id").loc[run_id]


def _eval_n(cfg, rs, variant="fp8", key="arith_gen/exact_match"):
    table = comparison_table(rs, endpoints_table(rs, cfg)).set_index(["algo", "variant"])
    return int(table.loc[("grpo", variant), f"{key} n"])


def test_a_run_directory_copied_into_another_seed_is_not_a_second_seed(tier):
    cfg, runs = tier
    assert _eval_n(cfg, load_tier(cfg)) == 2
    shutil.rmtree(runs / SEED1)
    shutil.copytree(runs / SEED0, runs / SEED1)  # seed0's files under seed1's name
    rs = load_tier(cfg)
    assert _row(rs, SEED1)["status"] == "missing" and _row(rs, SEED0)["status"] == "ok"
    assert "another run's files" in _row(rs, SEED1)["reason"]
    assert any(f"summary.json: belongs to run {SEED0!r}, not {SEED1!r}" in p for p in rs.problems)
    assert _eval_n(cfg, rs) == 1  # seed0 counted once, not twice with a zero-width interval


@pytest.mark.parametrize("where", ["run.json", "checkpoint/state.json"])
def test_any_file_naming_another_run_makes_it_missing(tier, where):
    cfg, runs = tier
    atomic_write_json(runs / SEED1 / where, {"run_id": SEED0})
    rs = load_tier(cfg)
    assert _row(rs, SEED1)["status"] == "missing"
    assert any(f"{where}: belongs to run {SEED0!r}" in p for p in rs.problems)


def test_a_finished_run_without_an_eval_file_is_a_data_problem(tier):
    cfg, runs = tier
    (runs / SEED1 / "eval" / "lm_eval.json").unlink()
    rs = load_tier(cfg)
    missing = [p for p in rs.problems if "lm_eval.json: missing" in p]
    assert len(missing) == 1 and SEED1 in missing[0] and "absent from the lm_eval means" in missing[0]
    assert _row(rs, SEED1)["status"] == "ok"  # its training metrics still count
    assert not any("agent.json: missing" in p for p in rs.problems)


def test_an_eval_of_another_checkpoint_is_left_out(tier):
    cfg, runs = tier
    run = RunDir(runs / SEED1)
    run.checkpoint.mkdir()
    (run.checkpoint / "model.safetensors").write_bytes(b"weights of the first training")
    for suite in ("lm_eval", "agent"):
        doc = json.loads(run.eval_file(suite).read_text())
        atomic_write_json(
            run.eval_file(suite), doc | {"checkpoint_digest": checkpoint_digest(run.checkpoint)}
        )
    rs = load_tier(cfg)
    assert not [p for p in rs.problems if SEED1 in p] and _eval_n(cfg, rs) == 2
    (run.checkpoint / "model.safetensors").write_bytes(b"weights of a retrain...")  # trained again since
    rs = load_tier(cfg)
    stale = [p for p in rs.problems if "scored another checkpoint" in p]
    assert len(stale) == 2 and all(SEED1 in p for p in stale)
    assert SEED1 not in set(rs.metric("lm_eval")["run_id"]) and _eval_n(cfg, rs) == 1


def test_checkpoint_digest_covers_big_files_by_their_ends(tmp_path):
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    big = bytearray(6 << 20)
    (ckpt / "model.safetensors").write_bytes(big)
    first = checkpoint_digest(ckpt)
    big[-1] = 1
    (ckpt / "model.safetensors").write_bytes(big)
    assert checkpoint_digest(ckpt) != first
    assert checkpoint_digest(tmp_path / "nope") is None


def test_a_checkpoint_damaged_since_training_is_not_reported(tier):
    """A byte flipped in the middle of a big `model.safetensors` (where `checkpoint_digest` does not
    look) after the eval scored it: the checkpoint's own `state.json` hashes name it, scores left out."""
    from fp8rl.io import sha256_file

    cfg, runs = tier
    run = RunDir(runs / SEED1)
    run.checkpoint.mkdir()
    weights = bytearray(6 << 20)
    (run.checkpoint / "model.safetensors").write_bytes(weights)
    files = {"model.safetensors": sha256_file(run.checkpoint / "model.safetensors")}
    atomic_write_json(run.checkpoint / "state.json", {"run_id": SEED1, "step": 3, "files": files})
    for suite in ("lm_eval", "agent"):
        doc = json.loads(run.eval_file(suite).read_text())
        atomic_write_json(
            run.eval_file(suite), doc | {"checkpoint_digest": checkpoint_digest(run.checkpoint)}
        )
    assert not [p for p in load_tier(cfg).problems if SEED1 in p]
    weights[3 << 20] ^= 0x01
    (run.checkpoint / "model.safetensors").write_bytes(weights)
    assert (
        checkpoint_digest(run.checkpoint)
        == json.loads(run.eval_file("agent").read_text())["checkpoint_digest"]
    )  # its ends are unchanged
    rs = load_tier(cfg)
    damaged = [p for p in rs.problems if "checkpoint is damaged" in p]
    assert len(damaged) == 2 and all("model.safetensors: corrupt" in p for p in damaged)
    assert SEED1 not in set(rs.metric("lm_eval")["run_id"]) and _eval_n(cfg, rs) == 1
