"""`build_report(cfg)`: load a tier's runs and write its tables, plots, HTML report and manifest.

The files are those of `paths.ReportPaths.for_config(cfg).outputs()`. The report is built whole in a
temp folder (`{R}/.report.*.tmp`), then moved into place file by file with `report.json` last: the old
`report.json` is removed first, and the new one records the sha256 of every other output (`files`),
so a report killed half-way has no `report.json` and a mix of two reports never passes `fp8rl publish`
(which checks the hashes). `report.lock` is held throughout: one report (or publication) of a tier at a
time, and what a killed report left (temp folders and files) is removed before the next one starts.
Missing, diverged and failed runs are counted in every table and never stop the report; unusable data
(malformed metrics lines, unreadable JSON) is listed in the report and in `report.json`. A matrix with
FP8 conditions also gets the mechanism table and figures (mechanism.py). Every report has the per-run
endpoints (endpoints.py) and the bf16 control check (control.py): a control that did not learn is said
in a banner at the top of report.html, first in the notes of every table that compares variants, and in
report.json's `control`.
"""

from __future__ import annotations

import html
import math
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig, resolve_run
from fp8rl.io import atomic_write_json, atomic_write_text, fsync_dir, remove_stale_temps, sha256_file
from fp8rl.provenance import git_commit
from fp8rl.report.base_models import NOTES as BASE_NOTES
from fp8rl.report.base_models import base_model_table, runs_numerics
from fp8rl.report.comparison import comparison_table, has_conditions, zero_width_problems
from fp8rl.report.control import NOTES as CONTROL_NOTES
from fp8rl.report.control import control_summary, control_table, control_view, void_notes
from fp8rl.report.endpoints import FLOAT_FORMAT, endpoints_table, endpoints_view
from fp8rl.report.endpoints import NOTES as ENDPOINT_NOTES
from fp8rl.report.explainer import MECHANISM
from fp8rl.report.figures import CAPTIONS
from fp8rl.report.html import render_html
from fp8rl.report.load import STATUSES, RunSet, load_tier
from fp8rl.report.markdown import (
    COMPARISON_NOTES,
    PAIRED_NOTES,
    THROUGHPUT_NOTES,
    comparison_markdown,
    comparison_view,
    numbers_view,
    paired_view,
    to_markdown,
)
from fp8rl.report.mechanism import MECHANISM_NOTES, mechanism_plots, mechanism_table, mechanism_view
from fp8rl.report.paths import ReportPaths
from fp8rl.report.plots import write_plots
from fp8rl.report.summaries import eval_keys
from fp8rl.report.summary_page import summary_page
from fp8rl.report.throughput_table import throughput_table

RUN_COLUMNS = ["run_id", "status", "reason", "step", "steps_planned", "malformed_lines", "execution"]
CONDITION_RUN_COLUMNS = ["run_id", "condition", *RUN_COLUMNS[1:]]  # matrices with FP8 conditions


def runs_table(runset: RunSet) -> pd.DataFrame:
    runs = runset.runs.copy()
    runs["execution"] = runs["emulated"].map(
        lambda e: "" if e is None or e != e else ("emulated" if e else "hardware")
    )
    for col in ("step", "steps_planned"):
        runs[col] = runs[col].map(lambda v: "" if v is None or v != v else str(int(v)))
    runs["reason"] = runs["reason"].map(lambda v: "" if v is None or v != v else str(v))
    return runs[CONDITION_RUN_COLUMNS if has_conditions(runs) else RUN_COLUMNS]


def markdown_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its text cells safe in a Markdown table (a run's reason is free text, an exception's
    message): line breaks as spaces, `|` escaped, `&`, `<` and `>` as HTML entities."""

    def cell(v):
        return (
            html.escape(" ".join(v.splitlines()), quote=False).replace("|", "\\|")
            if isinstance(v, str)
            else v
        )

    return frame.map(cell)


DEVIATION_NOTES = [
    "How runs differ from the setup the config asks for, as the backend that ran them recorded it "
    "(`summary.json` `deviations`; verl runs: docs/paper_deviations.md). `runs`: how many runs have it; "
    "`variants`: which."
]


def deviations_table(runset: RunSet) -> pd.DataFrame:
    """One row per distinct recorded deviation: its text, how many runs have it and their variants;
    empty when no run recorded one (the reference trainer runs the config as written)."""
    runs = runset.runs
    if "deviations" not in runs:
        return pd.DataFrame(columns=["deviation", "runs", "variants"])
    rows: dict[str, dict] = {}
    for devs, variant in zip(runs["deviations"], runs["variant"], strict=False):
        for d in devs if isinstance(devs, tuple) else ():
            row = rows.setdefault(d, {"deviation": d, "runs": 0, "variants": []})
            row["runs"] += 1
            row["variants"] += [] if variant in row["variants"] else [variant]
    out = pd.DataFrame(list(rows.values()), columns=["deviation", "runs", "variants"])
    out["variants"] = out["variants"].map(", ".join)
    return out


def _csv(frame: pd.DataFrame, path: Path, float_format: str = "%.6g") -> None:
    atomic_write_text(path, frame.to_csv(index=False, float_format=float_format))


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


def write_stability_report(
    cfg: ExperimentConfig, runset: RunSet, paths: ReportPaths, runs_dir: Path, title: str, control: dict
) -> tuple[list[tuple[str, list[str], pd.DataFrame]], list[tuple[Path, str]]]:
    """The stability tables and figures of a tier with a dose axis (fp8rl.report.stability); returns
    its HTML sections and (figure, caption) pairs. `control`: report.json's (a void comparison is said
    in the notes)."""
    from fp8rl.report.stability import (
        BREAKING_NOTES,
        STABILITY_NOTES,
        breaking_dose_table,
        breaking_view,
        run_stability,
        stability_table,
        stability_view,
    )
    from fp8rl.report.stability_plots import write_stability_plots

    per_run = run_stability(runset, runs_dir, cfg)
    table = stability_table(per_run)
    breaking = breaking_dose_table(table)
    view, b_view = stability_view(table), breaking_view(breaking)
    notes, b_notes = void_notes(control, STABILITY_NOTES), void_notes(control, BREAKING_NOTES)
    _csv(table, paths.table("stability", "csv"))
    atomic_write_text(paths.table("stability", "md"), to_markdown(f"{title}: stability", view, notes))
    _csv(breaking, paths.table("breaking_dose", "csv"))
    atomic_write_text(
        paths.table("breaking_dose", "md"), to_markdown(f"{title}: breaking dose", b_view, b_notes)
    )
    figures = write_stability_plots(runset, per_run, table, paths.plots_dir)
    sections = [("Stability", notes, view), ("Breaking dose", b_notes, b_view)]
    return sections, [(files[0], CAPTIONS[name]) for name, files in figures.items()]


def write_study_report(
    cfg: ExperimentConfig, runset: RunSet, paths: ReportPaths, title: str, control: dict
) -> list[tuple[str, list[str], pd.DataFrame]]:
    """The arms, planned and exploratory tables of a config with a `study` section; returns their HTML
    sections, planned first. Where the control did not learn (`control`: report.json's) the contrasts'
    notes say the comparison is void, and so does each planned decision of the view."""
    from fp8rl.report.planned import SECTION_TITLES, study_tables

    tables = study_tables(runset, cfg)
    sections = []
    for name in ("planned", "exploratory", "arms"):
        table, view, notes = tables[name]
        if name != "arms":
            notes = void_notes(control, notes)
        if name == "planned" and control["comparison_void"]:
            view = view.assign(decision=view["decision"] + " (void: the bf16 control did not learn)")
        _csv(table, paths.table(name, "csv"))
        atomic_write_text(
            paths.table(name, "md"), to_markdown(f"{title}: {SECTION_TITLES[name]}", view, notes)
        )
        sections.append((SECTION_TITLES[name], notes, view))
    return sections


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
        stage = ReportPaths(
            Path(tempfile.mkdtemp(prefix=".report.", suffix=".tmp", dir=final.root)),
            final.mechanism,
            final.stability,
            final.study,
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
    """Write every output into `paths` (a staging folder); report.json lists the outputs at their `final`
    places and records their hashes. Returns the manifest."""
    runset = load_tier(cfg, runs_dir)
    keys = eval_keys(runset)
    comparison = comparison_table(runset, cfg.stability.baseline_steps)
    runset.problems.extend(zero_width_problems(comparison))
    throughput = throughput_table(runset)
    runs = runs_table(runset)
    counts = {s: int((runset.runs["status"] == s).sum()) for s in STATUSES}
    title = f"fp8rl {cfg.tier} report"

    endpoints = endpoints_table(runset, cfg, runs_dir)
    control = control_table(endpoints)
    control_info = control_summary(control)
    _csv(endpoints, paths.table("endpoints", "csv"), FLOAT_FORMAT)
    atomic_write_text(
        paths.table("endpoints", "md"),
        to_markdown(f"{title}: per-run endpoints", markdown_cells(endpoints_view(endpoints)), ENDPOINT_NOTES),
    )
    c_view = control_view(control)
    c_notes = [control_info["statement"], *CONTROL_NOTES]
    _csv(control, paths.table("control", "csv"))
    atomic_write_text(paths.table("control", "md"), to_markdown(f"{title}: bf16 control", c_view, c_notes))

    _csv(runs, paths.table("runs", "csv"))
    status_note = [", ".join(f"{s}: {n}" for s, n in counts.items())]
    atomic_write_text(
        paths.table("runs", "md"), to_markdown(f"{title}: runs", markdown_cells(runs), status_note)
    )
    _csv(comparison, paths.table("comparison", "csv"))
    view = comparison_view(comparison, keys)
    paired = paired_view(comparison)
    atomic_write_text(
        paths.table("comparison", "md"),
        comparison_markdown(f"{title}: comparison", view, paired, void_notes(control_info, COMPARISON_NOTES)),
    )
    bases = base_model_table(final.root, runset.problems)
    _csv(bases, paths.table("base_models", "csv"))
    atomic_write_text(
        paths.table("base_models", "md"), to_markdown(f"{title}: base models", bases, BASE_NOTES)
    )
    _csv(throughput, paths.table("throughput", "csv"))
    tp_view = numbers_view(throughput)
    atomic_write_text(
        paths.table("throughput", "md"), to_markdown(f"{title}: throughput", tp_view, THROUGHPUT_NOTES)
    )

    one_per_algo = {r.algo: r for r in cfg.runs()}.values()
    clip_bounds = {r.algo: resolve_run(cfg, r).bounds for r in one_per_algo}
    plots = write_plots(runset, comparison, keys, throughput, paths.plots_dir, clip_bounds)
    sections = [
        ("Comparison", void_notes(control_info, COMPARISON_NOTES), view),
        ("Paired: FP8 vs its BF16 shadow", PAIRED_NOTES, paired),
    ]
    if paths.mechanism:
        mechanism = mechanism_table(comparison, runset, cfg)
        _csv(mechanism, paths.table("mechanism", "csv"))
        mech_view = mechanism_view(mechanism)
        mech_notes = void_notes(control_info, MECHANISM_NOTES)
        atomic_write_text(
            paths.table("mechanism", "md"), to_markdown(f"{title}: mechanism", mech_view, mech_notes)
        )
        sections.append(("Mechanism: excess clipping vs FP8 condition", mech_notes, mech_view))
        plots |= mechanism_plots(mechanism, paths.plots_dir)
    sections.append(("Base models", BASE_NOTES, bases))
    sections.append(("Throughput", THROUGHPUT_NOTES, tp_view))
    if not (deviations := deviations_table(runset)).empty:
        sections.insert(0, ("Deviations from the requested setup", DEVIATION_NOTES, deviations))
    captions = [(files[0], CAPTIONS[name]) for name, files in plots.items()]
    if paths.stability:
        stability_sections, more = write_stability_report(cfg, runset, paths, runs_dir, title, control_info)
        sections[:0] = stability_sections
        captions += more
    if paths.study:  # the pre-registered study's answers come first (fp8rl.report.planned)
        sections[:0] = write_study_report(cfg, runset, paths, title, control_info)
    sections.insert(0, ("Did the bf16 control learn?", c_notes, c_view))  # before any comparison
    sections.append(("Per-run endpoints", ENDPOINT_NOTES, endpoints_view(endpoints)))

    numerics = runs_numerics(runs_dir)
    atomic_write_text(
        paths.summary, summary_page(cfg, paths.tables_dir, control_info["comparison_void"], numerics)
    )
    header = {
        "tier": cfg.tier,
        "config digest": cfg.digest(),
        "git commit": git_commit() or "unknown",
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "runs in matrix": str(len(runset.runs)),
        "numerics": "; ".join(f"{key}: {', '.join(vals) or 'none'}" for key, vals in numerics.items()),
    }
    page = render_html(
        title=title,
        header=header,
        status_counts=counts,
        problems=runset.problems,
        sections=sections,
        plots=captions,
        runs=runs,
        explainer=MECHANISM,
        banner=control_info["statement"] if control_info["comparison_void"] else None,
    )
    atomic_write_text(paths.html, page)

    manifest = {
        "tier": cfg.tier,
        "config_digest": cfg.digest(),
        "git_commit": git_commit(),
        "generated": header["generated"],
        "status_counts": counts,
        "numerics": numerics,
        "malformed_lines": int(runset.runs["malformed_lines"].sum()),
        "problems": runset.problems,
        "eval_scores": keys,
        "control": control_info,
        "mechanism": paths.mechanism,
        "stability": paths.stability,
        "study": paths.study,
        "outputs": [str(p) for p in final.outputs()],
        "files": output_hashes(paths),
    }
    atomic_write_json(paths.manifest, _json_safe(manifest))
    return manifest
