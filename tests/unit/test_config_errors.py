"""Every config in tests/data/bad_configs gets one clear error: exit 2, no traceback, and the
substrings its `# expect:` line lists (key path, line, allowed values)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fp8rl.cli import main

BAD = sorted((Path(__file__).resolve().parents[1] / "data" / "bad_configs").glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    first = path.read_bytes().splitlines()[0].decode()  # the rest may be deliberately not UTF-8
    assert first.startswith("# expect:"), f"{path.name} has no '# expect:' line"
    return [s.strip() for s in first.removeprefix("# expect:").split("|")]


def test_the_corpus_is_large_enough():
    assert len(BAD) >= 15


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_config_gets_a_clear_error(path, capsys):
    assert main(["config", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert str(path) in err
    for needle in expectations(path):
        assert needle in err, f"{needle!r} not in:\n{err}"


def test_missing_file_through_the_installed_command(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "matrix", str(missing)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "file not found" in proc.stderr and str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["alias_bomb", "recursive_alias"])
def test_alias_bombs_are_rejected_quickly(name, capsys):
    start = time.monotonic()
    assert main(["config", "validate", str(BAD[0].parent / f"{name}.yaml")]) == 2
    assert time.monotonic() - start < 5.0
    assert "Traceback" not in capsys.readouterr().err
