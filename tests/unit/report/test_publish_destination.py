"""`fp8rl publish --out DIR` replaces DIR whole, so it refuses (exit 2, nothing touched) a DIR that is not
a publication, a `DIR.old` that is not one, and a DIR at, above or inside a results folder; an earlier
publication there is replaced as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fixtures import consistent_manifest

from fp8rl.cli import main
from fp8rl.report.paths import ReportPaths

TIER = "smoke"


def _report(results: Path) -> ReportPaths:
    """A whole report of TIER under `results` (its files are placeholders, hashed in report.json), with a
    run directory beside it, as a real tier folder has."""
    paths = ReportPaths.for_tier(results, TIER)
    for out in paths.outputs()[:-1]:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"{out.name}\n")
    paths.manifest.write_text(json.dumps(consistent_manifest(paths.root)))
    run = paths.runs_dir / "grpo" / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return paths


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _publish(results: Path, out: Path) -> int:
    return main(["publish", TIER, "--results-dir", str(results), "--out", str(out)])


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    _report(tmp_path / "results")
    return tmp_path / "results"


def test_publish_refuses_an_out_folder_that_is_not_a_publication(results, tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "runs").mkdir(parents=True)
    (out / "notes.txt").write_text("keep me\n")
    (out / "runs" / "weights.bin").write_bytes(b"\0" * 16)
    before = _tree(tmp_path)
    assert _publish(results, out) == 2
    assert "exists and is not a publication" in capsys.readouterr().err
    assert _tree(tmp_path) == before


def test_publish_refuses_the_results_folder_itself(tmp_path, monkeypatch, capsys):
    """The slip the issue names: `--out results/ci` for `results/published/ci`, results_dir results/ci."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results" / "ci"
    _report(results)
    before = _tree(tmp_path)
    assert _publish(results, results) == 2
    assert "is not a publication" in capsys.readouterr().err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("where", ["smoke", "smoke/runs/new", "smoke/fresh"])
def test_publish_refuses_an_out_folder_inside_a_results_folder(results, tmp_path, capsys, where):
    before = _tree(tmp_path)
    assert _publish(results, results / where) == 2
    err = capsys.readouterr().err
    assert "results folder" in err or "is not a publication" in err
    assert _tree(tmp_path) == before
    assert not (results / "smoke" / "fresh").exists()


def test_publish_refuses_an_out_folder_above_the_results(results, tmp_path, capsys):
    out = tmp_path / "above"
    inner = out / "results"
    _report(inner)
    before = _tree(tmp_path)
    assert main(["publish", TIER, "--results-dir", str(inner), "--out", str(out)]) == 2
    assert _tree(tmp_path) == before


def test_publish_keeps_a_dot_old_folder_that_is_not_a_publication(results, tmp_path, capsys):
    out = tmp_path / "pub"
    old = tmp_path / "pub.old"
    old.mkdir()
    (old / "thesis.tex").write_text("years of work\n")
    before = _tree(tmp_path)
    assert _publish(results, out) == 2
    assert "pub.old: exists and is not a publication" in capsys.readouterr().err
    assert _tree(tmp_path) == before


def test_publish_refuses_a_link_as_its_out_folder(results, tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "data.csv").write_text("a,b\n")
    (tmp_path / "link").symlink_to(target)
    assert _publish(results, tmp_path / "link") == 2
    assert (target / "data.csv").read_text() == "a,b\n"


def test_publish_replaces_an_earlier_publication_and_its_dot_old(results, tmp_path):
    out = tmp_path / "published" / TIER
    assert _publish(results, out) == 0
    first = _tree(out)
    assert "report.json" in first and "provenance.json" in first
    (out / "tables" / "runs.md").write_text("edited\n")  # an edited publication is still one to replace
    (tmp_path / "published" / f"{TIER}.old").mkdir()  # what a killed swap leaves: an (empty) old copy
    assert _publish(results, out) == 0
    assert (out / "tables" / "runs.md").read_text() == "runs.md\n"
    assert sorted(p.name for p in out.parent.iterdir()) == [TIER]
