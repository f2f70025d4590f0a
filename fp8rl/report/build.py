"""`build_report(cfg)`: load a tier's runs and write its tables, plots, HTML report and manifest.

The files are those of `paths.ReportPaths.for_config(cfg).outputs()`. The report is built whole in a
temp folder (`{R}/.report.*.tmp`), then moved into place file by file with `report.json` last: the old
`report.json` is removed first, and the new one records the sha256 of every other output (`files`),
so a report killed half-way has no `report.json` and a mix of two reports never passes `fp8rl publish`
(which checks the hashes). `report.lock` is held throughout: one report (or publication) of a tier at a
time, and what a killed report left (temp folders and files) is removed before the next one starts.
Missing, diverged and failed runs are counted in every table and never stop the report; unusable data
(malformed metrics lines, unreadable JSON) is listed in the report and in `report.json`. A matrix with
FP8 conditions also gets the mechanism table and figures (mechanism.py), a study without a noise-dose
axis its time to divergence per arm (study_survival.py). Every report has the per-run
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig, resolve_run
from fp8rl.io import atomic_write_json, atomic_write_text, fsync_dir, remove_stale_temps, sha256_file
from fp8rl.provenance import git_commit
from fp8rl.report.base_models import NOTES as BASE_NOTES
from fp8rl.report.base_models import base_model_table, numerics_line, runs_numerics
from fp8rl.report.comparison import comparison_table, has_conditions, zero_width_notes
from fp8rl.report.control import NOTES as CONTROL_NOTES
from fp8rl.report.control import control_summary, control_table, control_view, never_ran, void_notes
from fp8rl.report.endpoints import FLOAT_FORMAT, endpoints_table, endpoints_view
from fp8rl.report.endpoints import notes as endpoint_notes
from fp8rl.report.explainer import MECHANISM
from fp8rl.report.figures import CAPTIONS
from fp8rl.report.html import render_html, visible
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
from fp8rl.report.paired import seed_unit_notes
from fp8rl.report.paths import ReportPaths
from fp8rl.report.plots import arm_names, write_plots
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
    """`frame` with its text cells and column names safe in a Markdown table (a run's reason is free
    text, an exception's message; an eval column is named after a task): line breaks as spaces, other
    control characters escaped (`html.visible`), `|` escaped, `&`, `<` and `>` as HTML entities."""

    def cell(v):
        return (
            html.escape(visible(" ".join(v.splitlines())), quote=False).replace("|", "\\|")
            if isinstance(v, str)
            else v
        )

    return frame.map(cell).rename(columns=cell)


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


@dataclass(frozen=True)
class ReportTable:
    """One table of the report: `tables/{name}.csv` (`frame`, written with `float_format`) and
    `tables/{name}.md` (`# {tier title}: {title}`, the notes, the view), and the HTML section `heading`
    (notes and view). No `name`: an HTML section only; no `heading`: files only. `markdown`: the whole
    Markdown text where it is not the view as one table (the comparison's, grouped); `escape`: make the
    view's free-text cells safe in Markdown (`markdown_cells`; the HTML escapes its own)."""

    name: str | None
    heading: str | None
    title: str
    view: pd.DataFrame
    notes: list[str]
    frame: pd.DataFrame | None = None
    float_format: str = "%.6g"
    markdown: str | None = None
    escape: bool = False


def write_tables(tables: list[ReportTable], paths: ReportPaths, title: str) -> None:
    """Each table's CSV and Markdown file (those with a `name`)."""
    for t in tables:
        if t.name is None:
            continue
        atomic_write_text(
            paths.table(t.name, "csv"), t.frame.to_csv(index=False, float_format=t.float_format)
        )
        view = markdown_cells(t.view) if t.escape else t.view
        text = t.markdown or to_markdown(f"{title}: {t.title}", view, t.notes)
        atomic_write_text(paths.table(t.name, "md"), text)


def html_sections(tables: list[ReportTable]) -> list[tuple[str, list[str], pd.DataFrame]]:
    """The HTML report's sections, in the order of `tables`."""
    return [(t.heading, t.notes, t.view) for t in tables if t.heading is not None]


def _json_safe(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


def stability_tables(
    cfg: ExperimentConfig, runset: RunSet, paths: ReportPaths, runs_dir: Path, control: dict
) -> tuple[list[ReportTable], list[tuple[Path, str]]]:
    """The stability and breaking-dose tables of a tier with a dose axis (fp8rl.report.stability), and
    its figures' (file, caption) pairs (the figures are written here). `control`: report.json's (a void
    comparison is said in the notes)."""
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
    tables = [
        ReportTable("stability", "Stability", "stability", stability_view(table),
                    void_notes(control, STABILITY_NOTES), table),
        ReportTable("breaking_dose", "Breaking dose", "breaking dose", breaking_view(breaking),
                    void_notes(control, BREAKING_NOTES), breaking),
    ]  # fmt: skip
    figures = write_stability_plots(runset, per_run, table, paths.plots_dir)
    return tables, [(files[0], CAPTIONS[name]) for name, files in figures.items()]


def study_report_tables(cfg: ExperimentConfig, runset: RunSet, control: dict) -> list[ReportTable]:
    """The planned, exploratory and arms tables of a config with a `study` section, in that order. Where
    the control did not learn (`control`: report.json's) the contrasts' notes say the comparison is
    void, and so does each planned decision of the view: because no control run finished where none
    did (`control.never_ran`), else because the control did not learn."""
    from fp8rl.report.planned import SECTION_TITLES, study_tables

    tables = study_tables(runset, cfg)
    out = []
    for name in ("planned", "exploratory", "arms"):
        table, view, notes = tables[name]
        if name != "arms":
            notes = void_notes(control, notes)
        if name == "planned" and control["comparison_void"]:
            why = (
                "no bf16 control run finished"
                if never_ran(control["groups"])
                else "the bf16 control did not learn"
            )
            view = view.assign(decision=view["decision"] + f" (void: {why})")
        out.append(ReportTable(name, SECTION_TITLES[name], SECTION_TITLES[name], view, notes, table))
    return out


def study_survival_tables(
    cfg: ExperimentConfig, runset: RunSet, paths: ReportPaths, runs_dir: Path
) -> tuple[list[ReportTable], list[tuple[Path, str]]]:
    """The time to divergence per arm of a study without a dose axis (fp8rl.report.study_survival), and
    the (file, caption) pairs of its figure and of the reward-gap figure (fp8rl.report.study_gap; both
    written here)."""
    from fp8rl.report.stability import run_stability
    from fp8rl.report.stability_plots import write_study_survival_plot
    from fp8rl.report.study_gap import reward_gaps, write_study_gap_plot
    from fp8rl.report.study_survival import NOTES, arm_runs, survival_table, survival_view

    per_arm = arm_runs(run_stability(runset, runs_dir, cfg), cfg)
    table = survival_table(runset, per_arm, cfg)
    title = "Study arms: time to divergence"
    tables = [ReportTable("study_survival", title, "study arms, time to divergence", survival_view(table),
                          NOTES, table)]  # fmt: skip
    figures = write_study_survival_plot(per_arm, list(cfg.study.arms), paths.plots_dir)
    figures |= write_study_gap_plot(reward_gaps(runset, cfg), cfg, paths.plots_dir)
    return tables, [(files[0], CAPTIONS[name]) for name, files in figures.items()]


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
            final.heldout,
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
    notes = zero_width_notes(comparison)
    throughput = throughput_table(runset)
    runs = runs_table(runset)
    counts = {s: int((runset.runs["status"] == s).sum()) for s in STATUSES}
    title = f"fp8rl {cfg.tier} report"

    endpoints = endpoints_table(runset, cfg, runs_dir)
    control = control_table(endpoints)
    control_info = control_summary(control)
    view = comparison_view(comparison, keys)
    paired = paired_view(comparison)
    comparison_notes = seed_unit_notes(cfg.study, void_notes(control_info, COMPARISON_NOTES))
    bases = base_model_table(final.root, runset.problems)
    status_note = [", ".join(f"{s}: {n}" for s, n in counts.items())]

    # In the order of the HTML report: the control before any comparison, the pre-registered study's
    # answers first among those (fp8rl.report.planned), the per-run endpoints last.
    c_notes = [control_info["statement"], *CONTROL_NOTES]
    c_view = control_view(control)
    tables = [ReportTable("control", "Did the bf16 control learn?", "bf16 control", c_view, c_notes, control)]
    if paths.study:
        tables += study_report_tables(cfg, runset, control_info)
    stability_captions = []
    if paths.survival:
        survival, stability_captions = study_survival_tables(cfg, runset, paths, runs_dir)
        tables += survival
    if paths.stability:
        stability, stability_captions = stability_tables(cfg, runset, paths, runs_dir, control_info)
        tables += stability
    if not (deviations := deviations_table(runset)).empty:
        tables.append(
            ReportTable(None, "Deviations from the requested setup", "", deviations, DEVIATION_NOTES)
        )
    comparison_md = comparison_markdown(f"{title}: comparison", view, paired, comparison_notes)
    tables += [
        ReportTable("comparison", "Comparison", "comparison", view, comparison_notes, comparison,
                    markdown=comparison_md),
        ReportTable(None, "Paired: FP8 vs its BF16 shadow", "", paired, PAIRED_NOTES),
    ]  # fmt: skip
    one_per_algo = {r.algo: r for r in cfg.runs()}.values()
    clip_bounds = {r.algo: resolve_run(cfg, r).bounds for r in one_per_algo}
    names = arm_names(cfg.study.arms) if cfg.study is not None else None
    plots = write_plots(runset, comparison, keys, throughput, paths.plots_dir, clip_bounds, names)
    if paths.heldout:
        from fp8rl.report.secondary import NOTES as SECONDARY_NOTES
        from fp8rl.report.secondary import secondary_table, secondary_view

        secondary = secondary_table(endpoints, cfg)
        tables.insert(4, ReportTable(  # after the control and the study's planned, exploratory and arms
            "secondary", "Secondary analysis: the held-out bf16 endpoint", "secondary analysis",
            secondary_view(secondary), void_notes(control_info, SECONDARY_NOTES), secondary,
            float_format=FLOAT_FORMAT,
        ))  # fmt: skip
    if paths.mechanism:
        from fp8rl.report.mismatch_table import NOTES as MISMATCH_NOTES
        from fp8rl.report.mismatch_table import mismatch_table, mismatch_view

        mismatch = mismatch_table(endpoints, cfg)
        tables.append(ReportTable(
            "mismatch", "Mismatch in the field's units per setting", "mismatch calibration",
            mismatch_view(mismatch), MISMATCH_NOTES, mismatch, float_format=FLOAT_FORMAT,
        ))  # fmt: skip
        mechanism = mechanism_table(comparison, runset, cfg)
        tables.append(ReportTable(
            "mechanism", "Mechanism: excess clipping vs FP8 condition", "mechanism", mechanism_view(mechanism),
            seed_unit_notes(cfg.study, void_notes(control_info, MECHANISM_NOTES)), mechanism,
        ))  # fmt: skip
        plots |= mechanism_plots(mechanism, paths.plots_dir)
    tables += [
        ReportTable("base_models", "Base models", "base models", bases, BASE_NOTES, bases),
        ReportTable("throughput", "Throughput", "throughput", numbers_view(throughput), THROUGHPUT_NOTES, throughput),
        ReportTable("endpoints", "Per-run endpoints", "per-run endpoints", endpoints_view(endpoints),
                    endpoint_notes(cfg), endpoints, float_format=FLOAT_FORMAT, escape=True),
        ReportTable("runs", None, "runs", runs, status_note, runs, escape=True),
    ]  # fmt: skip
    write_tables(tables, paths, title)
    captions = [(files[0], CAPTIONS[name]) for name, files in plots.items()] + stability_captions

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
        "numerics": numerics_line(numerics),
    }
    page = render_html(
        title=title,
        header=header,
        status_counts=counts,
        problems=runset.problems,
        notes=notes,
        sections=html_sections(tables),
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
        "notes": notes,
        "eval_scores": keys,
        "control": control_info,
        "mechanism": paths.mechanism,
        "stability": paths.stability,
        "study": paths.study,
        "heldout": paths.heldout,
        "outputs": [str(p) for p in final.outputs()],
        "files": output_hashes(paths),
    }
    atomic_write_json(paths.manifest, _json_safe(manifest))
    return manifest
