"""`build_report(cfg)`: load a tier's runs and write its tables, plots, HTML report and manifest.

The files are those of `paths.ReportPaths.for_config(cfg).outputs()`. The report is built whole in a
temp folder (`{R}/.report.*.tmp`), then moved into place file by file with `report.json` last: the old
`report.json` is removed first, and the new one records the sha256 of every other output (`files`),
so a report killed half-way has no `report.json` and a mix of two reports never passes `fp8rl publish`
(which checks the hashes). `report.lock` is held throughout: one report (or publication) of a tier at a
time, and what a killed report left (temp folders and files) is removed before the next one starts.
Missing, diverged and failed runs are counted in every table and never stop the report; unusable data
(malformed metrics lines, unreadable JSON) is listed in the report and in `report.json`. The tables and
figures come from the builders of fp8rl.report.pipeline, over the runs loaded once: a matrix with FP8
conditions also gets the mechanism table and figures (mechanism.py), a study its time to divergence per
arm (study_survival.py). Every report has the per-run endpoints
(endpoints.py) and the bf16 control check (control.py): a control that did not learn is said in a
banner at the top of report.html, first in the notes of every table that compares variants, and in
report.json's `control`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from fp8rl.config import ExperimentConfig
from fp8rl.io import atomic_write_json, atomic_write_text, fsync_dir, remove_stale_temps, sha256_file
from fp8rl.provenance import git_commit
from fp8rl.report.base_models import numerics_line
from fp8rl.report.explainer import MECHANISM
from fp8rl.report.html import render_html
from fp8rl.report.paths import ReportPaths
from fp8rl.report.pipeline import build_sections, load_report_data
from fp8rl.report.summary_page import summary_page
from fp8rl.report.writer import html_sections, write_tables


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


LOCK_HINT = "wait for that report or publication of the tier to end"


def build_report(cfg: ExperimentConfig, runs_dir: str | Path | None = None) -> dict:
    """Write every report output for `cfg`'s tier; returns the manifest written to report.json.
    `RunDirLocked` (nothing written) while another report or publication of the tier holds its lock."""
    from fp8rl.locks import hold_lock

    final = ReportPaths.for_config(cfg)
    runs_dir = Path(runs_dir) if runs_dir is not None else final.runs_dir
    check_output_folders(final)
    with hold_lock(final.lock_file, LOCK_HINT):
        for folder, name in ((final.root, "report"), (final.tables_dir, "*"), (final.plots_dir, "*")):
            remove_stale_temps(folder, name)  # what a killed report left
        stage = dataclasses.replace(
            final, root=Path(tempfile.mkdtemp(prefix=".report.", suffix=".tmp", dir=final.root))
        )
        try:
            manifest = write_report(cfg, runs_dir, stage, final)
            install_report(stage, final)
        finally:
            shutil.rmtree(stage.root, ignore_errors=True)
    return manifest


class ReportPathError(ValueError):
    """An output folder of the report that leads out of the tier's folder; nothing was written."""


def check_output_folders(final: ReportPaths) -> None:
    """ReportPathError unless the report's folders (and report.json's folder) are the tier's own: a
    `tables/` or `plots/` that is a link, or resolves elsewhere, would take the report's writes outside
    `results_dir`."""
    root = final.root.resolve()
    for folder in (final.tables_dir, final.plots_dir):
        if folder.is_symlink() or (folder.exists() and not folder.resolve().is_relative_to(root)):
            raise ReportPathError(
                f"{folder}: a link (to {folder.resolve()}), not a folder of the tier's report; the report "
                "writes only inside its results folder: remove the link and run it again"
            )


def install_report(stage: ReportPaths, final: ReportPaths) -> None:
    """Move a report built under `stage` into `final`: the old report.json goes first (until the new one
    lands the report is incomplete), then every other output, then the new report.json."""
    final.manifest.unlink(missing_ok=True)
    fsync_dir(final.root)
    folders = {final.root}
    for src in stage.outputs():
        if src == stage.manifest:
            continue
        dst = final.root / src.relative_to(stage.root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        folders.add(dst.parent)
    for folder in folders:
        fsync_dir(folder)
    os.replace(stage.manifest, final.manifest)
    fsync_dir(final.root)


def output_hashes(paths: ReportPaths) -> dict[str, str]:
    """`{path relative to the report root: sha256}` of every output but report.json."""
    return {
        p.relative_to(paths.root).as_posix(): sha256_file(p) for p in paths.outputs() if p != paths.manifest
    }


def write_report(cfg: ExperimentConfig, runs_dir: Path, paths: ReportPaths, final: ReportPaths) -> dict:
    """Write every output into `paths` (a staging folder): the runs loaded once, the tables and figures
    of every builder (fp8rl.report.pipeline), then SUMMARY.md, report.html and report.json, which lists
    the outputs at their `final` places and records their hashes. Returns the manifest."""
    data = load_report_data(cfg, runs_dir, paths, final.root)
    tables, figures = build_sections(data)
    write_tables(tables, paths, data.title)

    numerics = data.numerics
    void = data.control_info["comparison_void"]
    atomic_write_text(paths.summary, summary_page(cfg, paths.tables_dir, void, numerics))
    header = {
        "tier": cfg.tier,
        "config digest": cfg.digest(),
        "git commit": git_commit() or "unknown",
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "runs in matrix": str(len(data.runset.runs)),
        "numerics": numerics_line(numerics),
    }
    page = render_html(
        title=data.title,
        header=header,
        status_counts=data.counts,
        problems=data.runset.problems,
        notes=data.notes,
        sections=html_sections(tables),
        plots=figures,
        runs=data.runs,
        explainer=MECHANISM,
        banner=data.control_info["statement"] if void else None,
    )
    atomic_write_text(paths.html, page)

    manifest = {
        "tier": cfg.tier,
        "config_digest": cfg.digest(),
        "git_commit": git_commit(),
        "generated": header["generated"],
        "status_counts": data.counts,
        "numerics": numerics,
        "malformed_lines": int(data.runset.runs["malformed_lines"].sum()),
        "problems": data.runset.problems,
        "notes": data.notes,
        "eval_scores": data.keys,
        "control": data.control_info,
        "mechanism": paths.mechanism,
        "stability": paths.stability,
        "study": paths.study,
        "heldout": paths.heldout,
        "outputs": [str(p) for p in final.outputs()],
        "files": output_hashes(paths),
    }
    atomic_write_json(paths.manifest, _json_safe(manifest))
    return manifest
