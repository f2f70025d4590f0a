"""The login node's preflight (`python -m fp8rl.validation CONFIG`): the config's checks, then the FP8
exclusions of each fetched model; a job's own preflight (fp8rl.adapters.preflight) runs only `job`."""

from __future__ import annotations

from pathlib import Path

from fp8rl import validation
from fp8rl.adapters import preflight

REPO = Path(__file__).resolve().parents[2]


def test_a_valid_config_passes_the_login_preflight(capsys):
    assert validation.main([str(REPO / "config" / "smoke.yaml")]) == 0
    assert "preflight: ok" in capsys.readouterr().err


def test_a_config_error_is_a_preflight_problem_naming_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "smoke.yaml").read_text() + "\nnot_a_section: 1\n")
    assert validation.main([str(bad)]) == 3
    err = capsys.readouterr().err
    assert "preflight: " in err and "not_a_section" in err and "1 problem(s)" in err


def test_the_job_preflight_no_longer_runs_the_login_part(capsys):
    assert preflight.main(["login", "config/smoke.yaml"]) == 2
    assert "python -m fp8rl.validation CONFIG" in capsys.readouterr().err
    assert validation.main([]) == 2
