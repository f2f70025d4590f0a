"""Kill injection for `fp8rl report` and `fp8rl publish`, as tests/integration/test_engine_train.py does
for training: each is SIGKILLed before every one of its filesystem steps in turn (tests/kill_points.py).
A report killed anywhere is either the old report, whole, or refused by publish; never a mix of two
reports. A publication is whole at every instant (the old one or the new one), and the next publish
leaves nothing of the killed one behind."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import REPO, write_run

import fp8rl.io
import fp8rl.report.build as build
from fp8rl.config_loader import load_config
from fp8rl.io import sha256_file
from fp8rl.publication.publish import PublishError, check_publishable, publish_tier, verify_outputs
from fp8rl.report.build import build_report
from fp8rl.report.paths import ReportPaths
from tests.kill_points import run_killed

PINS = ["matrix.algorithms=[grpo]", "matrix.models=[tiny]", "matrix.variants=[bf16, fp8]",
        "matrix.granularities=[tensorwise]", "matrix.seeds=[0, 1]"]  # fmt: skip
LATE = "grpo/tiny/fp8/tensorwise/seed1"  # missing from the first report, there in the second


def _config():
    return load_config(REPO / "config" / "smoke.yaml", ["results_dir=results", *PINS])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two copies of a small tier (`results_dir: results`, relative, so a copy has the same config
    digest) whose report (one run missing) is built and published, after which the missing run arrived:
    `old/results`, its report not rebuilt yet, and `new/results`, with the next report built (it differs:
    status counts, tables, plots)."""
    root = tmp_path_factory.mktemp("kill")
    cwd = Path.cwd()
    (root / "old").mkdir()
    try:
        os.chdir(root / "old")
        cfg = _config()
        runs = Path("results") / cfg.tier / "runs"
        for spec in cfg.runs():
            if spec.run_id != LATE:
                write_run(runs, spec, cfg)
        build_report(cfg)
        publish_tier(cfg.tier, "results", cfg)
        write_run(runs, next(s for s in cfg.runs() if s.run_id == LATE), cfg)
        shutil.copytree(root / "old", root / "new")
        os.chdir(root / "new")
        build_report(cfg)
    finally:
        os.chdir(cwd)
    return root


def _tier(built: Path, which: str, tmp_path: Path, monkeypatch):
    shutil.copytree(built / which / "results", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    return _config(), Path("results")


@pytest.fixture
def tier(built, tmp_path, monkeypatch):
    """(cfg, results dir) of a copy of the `old` tier, in the working directory: its report to be rebuilt."""
    return _tier(built, "old", tmp_path, monkeypatch)


@pytest.fixture
def rebuilt(built, tmp_path, monkeypatch):
    """(cfg, results dir) of a copy of the `new` tier, in the working directory: its new report to be
    published over the old one."""
    return _tier(built, "new", tmp_path, monkeypatch)


def _publishable(cfg, results: Path) -> int | None:
    """What `fp8rl publish` would find: None if it refuses, else the report's count of missing runs, after
    checking that the tables say what report.json says."""
    try:
        paths, manifest = check_publishable(cfg.tier, results, cfg)
        verify_outputs(paths, manifest)
    except PublishError:
        return None
    counts = manifest["status_counts"]
    runs = pd.read_csv(paths.table("runs", "csv"))["status"].value_counts().to_dict()
    assert runs == {s: n for s, n in counts.items() if n}
    assert ", ".join(f"{s}: {n}" for s, n in counts.items()) in paths.table("runs", "md").read_text()
    return counts["missing"]


def _whole(folder: Path) -> int | None:
    """The missing-run count of a publication if `folder` holds a whole one, else None."""
    try:
        manifest = json.loads((folder / "report.json").read_text())
        prov = json.loads((folder / "provenance.json").read_text())
    except (OSError, ValueError):
        return None
    if any(sha256_file(folder / rel) != digest for rel, digest in manifest["files"].items()):
        return None
    assert prov["status_counts"] == manifest["status_counts"]
    return manifest["status_counts"]["missing"]


def _snapshot(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True)


@pytest.mark.slow
def test_a_report_killed_at_any_step_of_its_swap_is_never_published_as_a_mix(tier, tmp_path, monkeypatch):
    cfg, results = tier
    real_install = build.install_report
    found: list[int | None] = []

    def install_killed_at_every_step(stage: ReportPaths, final: ReportPaths) -> None:
        _snapshot(stage.root, tmp_path / "stage")
        _snapshot(final.root, tmp_path / "final")
        k = 1
        while True:  # the staged report and the old one, as they were, then a kill before step k
            _snapshot(tmp_path / "stage", stage.root)
            for name in ("tables", "plots", "report.json", "report.html"):
                target = final.root / name
                shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
                if (tmp_path / "final" / name).is_dir():
                    shutil.copytree(tmp_path / "final" / name, target)
                elif (tmp_path / "final" / name).exists():
                    shutil.copy2(tmp_path / "final" / name, target)
            killed = run_killed(lambda: real_install(stage, final), k)
            found.append(_publishable(cfg, results))
            if not killed:
                break
            k += 1
        _snapshot(tmp_path / "stage", stage.root)
        real_install(stage, final)

    monkeypatch.setattr(build, "install_report", install_killed_at_every_step)
    build_report(cfg)
    # killed before its first step: the old report, whole; then refused; finished: the new one
    assert found[0] == 1 and found[-1] == 0, found
    assert set(found[1:-1]) == {None}, found
    assert len(found) > 20  # every output's rename was a kill point
    assert _publishable(cfg, results) == 0


def test_a_report_killed_while_it_builds_leaves_the_old_report_and_its_temp_is_cleared(tier):
    cfg, results = tier
    paths = ReportPaths.for_config(cfg)
    before = {p: p.read_bytes() for p in paths.outputs()}
    assert run_killed(lambda: build_report(cfg), 10)  # a few plots written into the staging folder
    assert {p: p.read_bytes() for p in paths.outputs()} == before
    assert fp8rl.io.temp_names(paths.root, "report")  # the killed report's staging folder
    assert _publishable(cfg, results) == 1
    (paths.plots_dir / ".reward.png.k1ll3d.tmp").write_bytes(b"\x89PNG half")  # killed atomic writes of
    (paths.tables_dir / ".runs.md.k1ll3d.tmp").write_text("| half")  # an earlier report, in place
    build_report(cfg)
    assert not fp8rl.io.temp_names(paths.root, "report") and not paths.lock_file.exists()
    assert not fp8rl.io.temp_names(paths.plots_dir) and not fp8rl.io.temp_names(paths.tables_dir)
    assert _publishable(cfg, results) == 0


@pytest.mark.slow
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_publication_killed_at_any_step_is_whole_and_the_next_one_recovers(
    rebuilt, tmp_path, monkeypatch, exchange
):
    cfg, results = rebuilt
    if not exchange:  # a filesystem that cannot swap two names (NFS): the old copy is moved aside first
        monkeypatch.setattr(fp8rl.io, "exchange_dirs", lambda a, b: False)
    published = results / "published"
    _snapshot(published, tmp_path / "published")
    dest = published / cfg.tier
    k = 1
    while True:
        _snapshot(tmp_path / "published", published)
        killed = run_killed(lambda: publish_tier(cfg.tier, results, cfg), k)
        now = _whole(dest)
        if exchange or now is not None:
            assert now in (1, 0), f"no whole publication after a kill at step {k}"
        else:  # between the two renames: the old one, whole, under the name the next publish restores
            assert _whole(published / f"{cfg.tier}.old") == 1, (
                f"no whole publication after a kill at step {k}"
            )
        if not killed:
            assert now == 0
            break
        if k % 4 == 1 or not dest.exists():  # the next publish recovers (checked at every fourth step)
            publish_tier(cfg.tier, results, cfg)
            assert _whole(dest) == 0
            assert sorted(p.name for p in published.iterdir()) == [cfg.tier]
        k += 1
    assert k > 20


def test_publish_refuses_a_report_whose_files_are_not_all_its_own(built, rebuilt, capsys):
    from fp8rl.cli import main

    cfg, results = rebuilt
    before = {p: p.read_bytes() for p in (results / "published" / cfg.tier).rglob("*") if p.is_file()}
    paths = ReportPaths.for_config(cfg)
    old_runs = built / "old" / "results" / cfg.tier / "tables" / "runs.md"
    paths.table("runs", "md").write_bytes(old_runs.read_bytes())  # another report's table beside report.json
    args = ["publish", cfg.tier, "--config", str(REPO / "config" / "smoke.yaml"),
            *(f"--set={p}" for p in ["results_dir=results", *PINS])]  # fmt: skip
    assert main(args) == 2
    assert "runs.md: not the file report.json records" in capsys.readouterr().err
    after = {p: p.read_bytes() for p in (results / "published" / cfg.tier).rglob("*") if p.is_file()}
    assert after == before
