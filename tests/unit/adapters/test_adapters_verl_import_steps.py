"""`fp8rl verl import-metrics` takes only integer steps and numbers a float holds: a malformed step is a
clear error naming the row (exit 2, nothing written), never a traceback, and never merged into another
step."""

from __future__ import annotations

import json

import pytest

from fp8rl.adapters.verl_metrics import import_rows
from fp8rl.cli import main


def _log(tmp_path, steps: list[str]) -> str:
    log = tmp_path / "verl_log.jsonl"
    log.write_text("".join(f'{{"step": {s}, "data": {{"actor/entropy": 1.0}}}}\n' for s in steps))
    return str(log)


@pytest.mark.parametrize(
    ("step", "shown"),
    [("[1]", "[1]"), ("Infinity", "inf"), ("NaN", "nan"), ("1e12", "1000000000000.0"), ("1.7", "1.7"),
     ("1000000000", "1000000000"), ("0", "0"), ("true", "True"), ('"3"', "3"), ("9" * 400, "9" * 40)],
)  # fmt: skip
def test_a_malformed_step_is_refused_naming_its_row(tmp_path, capsys, step, shown):
    out = tmp_path / "metrics.jsonl"
    assert main(["verl", "import-metrics", _log(tmp_path, ["1", step]), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"verl log row 2: step {shown} is not a step" in err and "Traceback" not in err
    assert not out.exists()


def test_two_fractional_steps_are_not_merged_into_one():
    with pytest.raises(ValueError, match="row 1: step 1.7 is not a step"):
        import_rows(
            [{"step": 1.7, "data": {"actor/entropy": 1.0}}, {"step": 1.2, "data": {"actor/entropy": 2.0}}]
        )


def test_a_value_no_float_holds_is_absent_not_a_crash(tmp_path):
    log = tmp_path / "verl_log.jsonl"
    log.write_text(json.dumps({"step": 1, "data": {"actor/entropy": 1.0}}).replace("1.0", "9" * 400) + "\n")
    rows = import_rows([json.loads(log.read_text())])
    assert rows == [{"step": 1}]
    assert main(["verl", "import-metrics", str(log), "--out", str(tmp_path / "m.jsonl")]) == 0


def test_a_log_nested_too_deeply_is_refused(tmp_path, capsys):
    log = tmp_path / "verl_log.jsonl"
    log.write_text('{"step": 1, "data": {"actor/entropy": 1.0}}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    assert main(["verl", "import-metrics", str(log), "--out", str(tmp_path / "m.jsonl")]) == 2
    assert "verl_log.jsonl:2: malformed JSON line (nested too deeply)" in capsys.readouterr().err
