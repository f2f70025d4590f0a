"""`fp8rl.run_checks.resume_problem`: a checkpoint resumes only over the metrics history it wrote."""

from __future__ import annotations

import json

import pytest

from fp8rl.run_checks import resume_problem
from fp8rl.run_files import RunDir


def _run(tmp_path, steps: int, tail: bytes = b"") -> tuple[RunDir, dict]:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    body = "".join(
        json.dumps({"step": s, "reward/mean": 0.1 * s}) + "\n" for s in range(1, steps + 1)
    ).encode()
    run.metrics.write_bytes(body + tail)
    return run, {"step": steps, "metrics_offset": len(body)}


def test_intact_history_resumes_whatever_follows_the_offset(tmp_path):
    run, meta = _run(tmp_path, 3, tail=b'{"step": 4, "rew')  # cut by a kill: resuming drops it
    assert resume_problem(run, meta) is None


def test_nothing_written_yet_needs_no_metrics_file(tmp_path):
    run = RunDir(tmp_path / "run")
    assert resume_problem(run, {"step": 0, "metrics_offset": 0}) is None


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda p: p.unlink(), "metrics.jsonl: missing, but the checkpoint in"),
        (lambda p: p.write_bytes(p.read_bytes()[:-5]), "bytes, shorter than the"),
        (
            lambda p: p.write_bytes(p.read_bytes().replace(b'"step": 2', b'"step": 7')),
            "metrics.jsonl:2: corrupt",
        ),
        (
            lambda p: p.write_bytes(p.read_bytes().replace(b"0.2", b"\xff\xfe\xfd")),
            "metrics.jsonl:2: corrupt",
        ),
    ],
    ids=["deleted", "cut", "renumbered", "bytes"],
)
def test_damaged_history_is_named_with_what_to_do(tmp_path, damage, says):
    run, meta = _run(tmp_path, 3)
    damage(run.metrics)
    problem = resume_problem(run, meta)
    assert problem is not None and says in problem
    assert f"delete the run directory {run.root} to start the run afresh" in problem


def test_offset_with_fewer_lines_than_steps_is_damage(tmp_path):
    run, meta = _run(tmp_path, 3)
    assert "metrics.jsonl:4: corrupt" in resume_problem(run, meta | {"step": 4})
    assert "state.json lacks a valid step" in resume_problem(run, {"step": "3", "metrics_offset": 10})
