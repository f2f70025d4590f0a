"""What a tier's DAG prints when it ends (fp8rl.commands.report.dag_end_text, the Snakefile's
`onsuccess:`): the comparison table and where the tables, plots and report are, under the config's
`{results_dir}/{tier}`, for any tier; and nothing stale passed off as this run's report."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from fp8rl.commands.report import dag_end_text, report_locations
from fp8rl.config_loader import load_config

REPO = Path(__file__).resolve().parents[2]


def _ci(tmp_path: Path, *overrides: str):
    return load_config(REPO / "config" / "ci.yaml", [f"results_dir={tmp_path / 'out'}", *overrides])


def test_the_end_of_a_dag_that_wrote_the_report_shows_its_comparison_and_paths(tmp_path):
    cfg = _ci(tmp_path)
    root = tmp_path / "out" / cfg.tier  # config/ci.yaml: results_dir results/ci, tier smoke
    shutil.copytree(REPO / "results" / "published" / "ci", root)
    (root / "report.json").touch()
    text = dag_end_text(cfg, since=time.time() - 60)
    comparison = (root / "tables" / "comparison.md").read_text().rstrip("\n")
    assert comparison in text
    assert f"tables:  {root}/tables/" in text and f"report:  {root}/report.html" in text
    assert f"(one page: {root}/SUMMARY.md)" in text
    assert ("tensorboard --logdir" in text) == cfg.tracking.tensorboard


def test_a_report_older_than_the_dag_or_missing_is_not_shown_as_its_result(tmp_path):
    cfg = _ci(tmp_path)
    root = tmp_path / "out" / cfg.tier
    assert dag_end_text(cfg, since=time.time()).startswith(
        f"no report yet: the DAG's default target writes it under {root}/"
    )
    shutil.copytree(REPO / "results" / "published" / "ci", root)
    os.utime(root / "report.json", (1, 1))
    text = dag_end_text(cfg, since=time.time())
    assert text == f"report not rebuilt by this run; the last one: {root}/report.html"


def test_locations_name_the_curves_command_only_with_tensorboard_on(tmp_path):
    on = report_locations(_ci(tmp_path, "tracking.tensorboard=true"))
    off = report_locations(_ci(tmp_path, "tracking.tensorboard=false"))
    assert on[-1] == f"curves:  tensorboard --logdir {tmp_path / 'out' / 'smoke' / 'runs'}"
    assert off == on[:-1] and len(off) == 3
