"""`fp8rl report` writes every declared output; `fp8rl publish` copies it with provenance, atomically."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import MALFORMED, MALFORMED_LINE, REPO, write_tier

from fp8rl.cli import main
from fp8rl.io import atomic_write_json
from fp8rl.report import PLOTS, report_outputs
from fp8rl.report.paths import TABLES

SMOKE = str(REPO / "config" / "smoke.yaml")


def report_args(results) -> list[str]:
    return ["--config", SMOKE, "--set", f"results_dir={results}"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A synthetic tier with its report built through the CLI (the DAG's call)."""
    tmp = tmp_path_factory.mktemp("built")
    write_tier(tmp)
    results = tmp / "results"
    # the fixture pins the smoke matrix; pass the same pins so the digests agree
    pins = [
        "--set=matrix.algorithms=[grpo, dapo]",
        "--set=matrix.models=[tiny]",
        "--set=matrix.variants=[bf16, fp8, fp8_tis, fp8_calib]",
        "--set=matrix.granularities=[tensorwise]",
        "--set=matrix.seeds=[0, 1]",
    ]
    assert main(["report", *report_args(results), *pins]) == 0
    return results, pins


def test_every_declared_output_is_written(built):
    results, _ = built
    outputs = report_outputs(results, "smoke")
    assert len(outputs) == len(TABLES) * 2 + len(PLOTS) * 2 + 3  # csv + md, png + svg, summary + html + json
    for path in outputs:
        data = Path(path).read_bytes()
        assert data, path
        if path.endswith(".png"):
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        if path.endswith(".svg"):
            assert b"<svg" in data[:2000]


def test_tables_count_every_status_and_html_is_self_contained(built):
    results, _ = built
    runs = pd.read_csv(results / "smoke" / "tables" / "runs.csv")
    assert runs["status"].value_counts().to_dict() == {"ok": 13, "diverged": 1, "failed": 1, "missing": 1}
    comparison = pd.read_csv(results / "smoke" / "tables" / "comparison.csv")
    assert comparison[["ok", "diverged", "failed", "missing"]].to_numpy().sum() == 16
    html = (results / "smoke" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(PLOTS)
    assert not re.search(r'src="(?!data:)', html)  # nothing loaded from outside the file
    assert f"metrics.jsonl:{MALFORMED_LINE}" in html and "Student t-interval" in html
    assert '<td class="status-diverged">diverged</td>' in html
    manifest = json.loads((results / "smoke" / "report.json").read_text())
    assert manifest["malformed_lines"] == 1 and MALFORMED in manifest["problems"][0]
    assert manifest["status_counts"]["missing"] == 1


def test_publish_copies_report_and_provenance(built, capsys):
    results, pins = built
    (results / "containers").mkdir(exist_ok=True)
    atomic_write_json(results / "containers" / "cpu.json", {"image": "fp8rl/cpu", "digest": "sha256:abc"})
    assert main(["publish", *report_args(results), *pins]) == 0  # the config names the tier
    assert "deprecated" not in capsys.readouterr().err
    (results / "published" / ".smoke.tmp-killed").mkdir()  # what a killed publish leaves
    # publishing again replaces the old copy; the older form (TIER and the config) still works
    assert main(["publish", "smoke", *report_args(results), *pins]) == 0
    assert "`fp8rl publish TIER --config FILE` is deprecated" in capsys.readouterr().err
    dest = results / "published" / "smoke"
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["containers"]["cpu"]["digest"] == "sha256:abc"
    assert (
        prov["config_digest"] == json.loads((results / "smoke" / "report.json").read_text())["config_digest"]
    )
    assert {"git_commit", "packages", "machine", "status_counts"} <= set(prov)
    assert "pandas" in prov["packages"]
    for src in report_outputs(results, "smoke"):
        rel = src.split("/smoke/", 1)[1]
        assert (dest / rel).read_bytes() == Path(src).read_bytes()
    assert sorted(p.name for p in (results / "published").iterdir()) == ["smoke"]  # no temp dirs left


def test_publish_refuses_bad_input_with_exit_2(built, tmp_path, capsys):
    results, pins = built
    assert main(["publish", "smoke", "--results-dir", str(tmp_path)]) == 2
    assert "run `fp8rl report` first" in capsys.readouterr().err
    assert main(["publish", "paper", *report_args(results), *pins]) == 2
    assert "does not match the config's tier 'smoke'" in capsys.readouterr().err
    other = ["--set", "schedule.steps=3"]  # another config than the report was built from
    assert main(["publish", "smoke", *report_args(results), *pins, *other]) == 2
    assert "config digest" in capsys.readouterr().err
    assert main(["publish", "bogus", "--results-dir", str(tmp_path)]) == 2  # a tier name, but no report
    assert "run `fp8rl report` first" in capsys.readouterr().err
    assert main(["publish", "../smoke", "--results-dir", str(tmp_path)]) == 2
    assert "not a path-safe tier name" in capsys.readouterr().err
    assert main(["publish"]) == 2
    assert "give the tier's config, --config FILE" in capsys.readouterr().err
    assert main(["publish", "smoke", "--set", "tier=smoke"]) == 2
    assert not (tmp_path / "published").exists()


def test_report_with_no_runs_at_all_reports_them_missing(tmp_path, capsys):
    assert main(["report", *report_args(tmp_path), "--set", "matrix.seeds=[0]"]) == 0
    runs = pd.read_csv(tmp_path / "smoke" / "tables" / "runs.csv")
    assert (runs["status"] == "missing").all() and len(runs) > 0
    assert "missing" in capsys.readouterr().out
    for path in report_outputs(tmp_path, "smoke"):
        assert Path(path).stat().st_size > 0


def test_report_bad_config_exits_2_before_writing(tmp_path, capsys):
    assert main(["report", *report_args(tmp_path), "--set", "matrix.variants=[fp9]"]) == 2
    assert "matrix.variants" in capsys.readouterr().err
    assert main(["report", *report_args(tmp_path), "--runs-dir", str(tmp_path / "nope")]) == 2
    assert not (tmp_path / "smoke").exists()


def test_a_linked_tables_folder_never_takes_the_report_outside_results(tmp_path, capsys):
    """`tables/` a symlink to a folder elsewhere: exit 2 naming it, nothing written there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    results = tmp_path / "results"
    (results / "smoke").mkdir(parents=True)
    (results / "smoke" / "tables").symlink_to(elsewhere)
    assert main(["report", *report_args(results), "--set", "matrix.seeds=[0]"]) == 2
    assert f"{results / 'smoke' / 'tables'}: a link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []
