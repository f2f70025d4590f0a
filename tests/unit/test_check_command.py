"""`fp8rl check`: a fresh tier's comparison table against a published one, within the published bands."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from fp8rl.cli import main

PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "published" / "smoke"


def _copy(dst: Path) -> Path:
    (dst / "tables").mkdir(parents=True)
    shutil.copy(PUBLISHED / "tables" / "comparison.csv", dst / "tables" / "comparison.csv")
    return dst


def _perturb(root: Path, variant: str, column: str, value: str) -> None:
    path = root / "tables" / "comparison.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    fields = list(rows[0])
    for row in rows:
        if row["algo"] == "grpo" and row["variant"] == variant:
            row[column] = value
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def test_an_unchanged_run_passes_and_states_its_bands(tmp_path, capsys):
    fresh = _copy(tmp_path / "fresh")
    assert main(["check", str(fresh), "--against", str(PUBLISHED)]) == 0
    out = capsys.readouterr().out
    assert "band: the published 95 % interval over its seeds" in out
    assert "ok   grpo/tiny/tensorwise/fp8 clip_low_neg: " in out


def test_a_perturbed_run_fails_naming_the_metric_and_variant(tmp_path, capsys):
    fresh = _copy(tmp_path / "fresh")
    _perturb(fresh, "fp8_calib", "clip_low_neg", "0.5")  # far outside the published interval
    assert main(["check", str(fresh), "--against", str(PUBLISHED)]) == 1
    err = capsys.readouterr().err
    assert "FAIL clip_low_neg of grpo/tiny/tensorwise/fp8_calib left its band: 0.5 not in [" in err
    assert "fp8rl check: 1 metric(s) outside the published bands" in err
    # widening the bands enough lets it through
    assert main(["check", str(fresh), "--against", str(PUBLISHED), "--widen", "1000"]) == 0


def test_a_missing_cell_fails_and_a_missing_table_is_a_usage_error(tmp_path, capsys):
    fresh = _copy(tmp_path / "fresh")
    path = fresh / "tables" / "comparison.csv"
    lines = path.read_text().splitlines()
    path.write_text(
        "\n".join(line for line in lines if ",fp8_tis," not in line or "grpo," not in line) + "\n"
    )
    assert main(["check", str(fresh), "--against", str(PUBLISHED)]) == 1
    assert "grpo/tiny/tensorwise/fp8_tis: missing from" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "nowhere"), "--against", str(PUBLISHED)]) == 2


def test_a_published_table_edited_since_publication_is_refused(tmp_path, capsys):
    """Every published interval rewritten to +-1000 would pass any fresh value: the publication is checked
    against its report.json first (exit 2 naming the file), and so is a fresh report folder with one."""
    published = tmp_path / "published"
    shutil.copytree(PUBLISHED, published)
    fresh = _copy(tmp_path / "fresh")
    _perturb(fresh, "fp8_calib", "clip_low_neg", "0.5")
    path = published / "tables" / "comparison.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        for col in row:
            if col.endswith(" ci_low") or col.endswith(" ci_high"):
                row[col] = "-1000" if col.endswith("ci_low") else "1000"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert main(["check", str(fresh), "--against", str(published)]) == 2
    assert f"{path}: not the file report.json records" in capsys.readouterr().err
    fresh2 = _tier_folder(tmp_path / "fresh2")
    (fresh2 / "tables" / "runs.md").write_text("edited\n")
    assert main(["check", str(fresh2), "--against", str(PUBLISHED)]) == 2
    assert "runs.md: not the file report.json records" in capsys.readouterr().err


def _tier_folder(dst: Path) -> Path:
    """A fresh tier folder as the DAG leaves it: the report's files (here the published ones, with their
    report.json) beside the runs, bases, data, logs and configs the report was built from."""
    shutil.copytree(PUBLISHED, dst)
    (dst / "provenance.json").unlink()  # `fp8rl publish` adds it; a fresh report has none
    for rel in (
        "base/tiny/config.json",
        "base/tiny/model.safetensors",
        "runs/grpo/tiny/bf16/none/seed0/summary.json",
        "runs/grpo/tiny/bf16/none/seed0/eval/lm_eval.json",
        "data/train.jsonl",
        "logs/report/report.log",
        "config/0123456789abcdef.yaml",
        "digests/report/report.json.digest",
        "benchmarks/report/report.tsv",
    ):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text("{}\n")
    return dst


def test_a_fresh_tier_folder_is_checked_on_its_report_files_only(tmp_path, capsys):
    """The CI job checks results/ci/smoke, a tier folder whose runs, bases and logs sit beside the report:
    those are not files of the report, so they do not fail the check (they did, in CI), while the
    publication it is checked against may hold nothing its manifest does not record."""
    fresh = _tier_folder(tmp_path / "fresh")
    assert main(["check", str(fresh), "--against", str(PUBLISHED)]) == 0, capsys.readouterr().err
    published = tmp_path / "published"
    shutil.copytree(PUBLISHED, published)
    (published / "base" / "tiny").mkdir(parents=True)
    (published / "base" / "tiny" / "config.json").write_text("{}\n")
    assert main(["check", str(fresh), "--against", str(published)]) == 2
    assert "config.json: not one of the files report.json records" in capsys.readouterr().err


def test_a_publication_without_a_single_band_checks_nothing_and_says_so(tmp_path, capsys):
    """A single-seed publication has no interval (n = 1), so no band: that is not a pass."""
    import json

    from fp8rl.io import sha256_file

    published = tmp_path / "published"
    (published / "tables").mkdir(parents=True)
    table = published / "tables" / "comparison.csv"
    with (PUBLISHED / "tables" / "comparison.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        for col in row:
            if col.endswith((" ci_low", " ci_high")):
                row[col] = ""
            elif col.endswith(" n"):
                row[col] = "1"
    with table.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    shutil.copy(PUBLISHED / "report.html", published / "report.html")  # what report.json's fields agree with
    manifest = json.loads((PUBLISHED / "report.json").read_text()) | {
        "files": {rel: sha256_file(published / rel) for rel in ("tables/comparison.csv", "report.html")}
    }
    (published / "report.json").write_text(json.dumps(manifest))
    fresh = tmp_path / "fresh"
    (fresh / "tables").mkdir(parents=True)
    shutil.copy(table, fresh / "tables" / "comparison.csv")
    assert main(["check", str(fresh), "--against", str(published)]) == 2
    err = capsys.readouterr().err
    assert f"{published}: nothing to check" in err and "every metric" not in err
