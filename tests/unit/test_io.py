"""Atomic writes leave the old file or the new one, never a partial one."""

from __future__ import annotations

import pytest

from fp8rl.io import atomic_write, atomic_write_json, read_jsonl
from fp8rl.provenance import provenance


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "summary.json"
    atomic_write_json(target, {"status": "ok"})

    def boom(tmp):
        tmp.write_text('{"status": "half')
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text().strip().endswith("}")
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_non_finite_numbers_are_refused(tmp_path):
    with pytest.raises(ValueError):
        atomic_write_json(tmp_path / "m.json", {"loss": float("nan")})
    assert not (tmp_path / "m.json").exists()


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: malformed"):
        read_jsonl(path)


def test_provenance_has_versions_and_machine():
    prov = provenance(config_digest="abc")
    assert prov["config_digest"] == "abc"
    assert "torch" in prov["packages"] and prov["machine"]["cpus"] >= 1


def test_written_files_get_the_usual_mode(tmp_path):
    import os

    umask = os.umask(0)
    os.umask(umask)
    path = atomic_write_json(tmp_path / "report.json", {"a": 1})
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
