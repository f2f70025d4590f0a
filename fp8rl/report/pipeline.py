"""A tier's report as a pipeline: its runs are loaded once into `ReportData` (the run table and what
every table is computed from), each table builder takes that and returns its tables and the figures it
drew (a `Section`), and `BUILDERS` lists the builders in the order the report reads: the bf16 control
before any comparison, the pre-registered study's answers first among those, the per-run endpoints
last. A builder whose part the tier lacks (no study, no FP8 conditions) returns an empty section; none
reaches back into the loader. fp8rl.report.build writes what they return (fp8rl.report.writer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fp8rl.config import ExperimentConfig, resolve_run
from fp8rl.report.base_models import NOTES as BASE_NOTES
from fp8rl.report.base_models import base_model_table, runs_numerics
from fp8rl.report.comparison import comparison_table, has_conditions, zero_width_notes
from fp8rl.report.control import NOTES as CONTROL_NOTES
from fp8rl.report.control import control_summary, control_table, control_view, never_ran, void_notes
from fp8rl.report.endpoints import FLOAT_FORMAT, endpoints_table, endpoints_view
from fp8rl.report.endpoints import notes as endpoint_notes
from fp8rl.report.figures import captioned
from fp8rl.report.heldout_curve import heldout_curve_section
from fp8rl.report.load import STATUSES, RunSet, load_tier
from fp8rl.report.markdown import (
    COMPARISON_NOTES,
    PAIRED_NOTES,
    THROUGHPUT_NOTES,
    comparison_markdown,
    comparison_view,
    numbers_view,
    paired_view,
)
from fp8rl.report.paired import seed_unit_notes
from fp8rl.report.paths import ReportPaths
from fp8rl.report.summaries import eval_keys
from fp8rl.report.throughput_table import throughput_table
from fp8rl.report.writer import ReportTable

Figure = tuple[Path, str]  # a figure's PNG and its caption in report.html
Section = tuple[list[ReportTable], list[Figure]]

RUN_COLUMNS = ["run_id", "status", "reason", "step", "steps_planned", "malformed_lines", "execution"]
CONDITION_RUN_COLUMNS = ["run_id", "condition", *RUN_COLUMNS[1:]]  # matrices with FP8 conditions


def runs_table(runset: RunSet) -> pd.DataFrame:
    """One row per run: its status, the reason a run did not end ok, its steps and how it executed."""
    runs = runset.runs.copy()
    runs["execution"] = runs["emulated"].map(
        lambda e: "" if e is None or e != e else ("emulated" if e else "hardware")
    )
    for col in ("step", "steps_planned"):
        runs[col] = runs[col].map(lambda v: "" if v is None or v != v else str(int(v)))
    runs["reason"] = runs["reason"].map(lambda v: "" if v is None or v != v else str(v))
    return runs[CONDITION_RUN_COLUMNS if has_conditions(runs) else RUN_COLUMNS]


@dataclass(frozen=True)
class ReportData:
    """What every table of a tier's report is computed from, loaded once by `load_report_data`: the
    config, the runs (`runset`, and `runs`, their status table), the per-run endpoints, the comparison
    per variant and the control check built on them, the numerics the runs recorded, and where the
    figures go (`paths`, the report's staging folder). `notes`: benign data notes (zero-width
    intervals), apart from `runset.problems`."""

    cfg: ExperimentConfig
    runset: RunSet
    runs_dir: Path  # where the runs were read from (their samples.jsonl too)
    paths: ReportPaths
    keys: list[str]
    comparison: pd.DataFrame
    endpoints: pd.DataFrame
    control: pd.DataFrame
    control_info: dict
    throughput: pd.DataFrame
    runs: pd.DataFrame
    bases: pd.DataFrame
    counts: dict[str, int]
    notes: list[str]
    numerics: dict

    @property
    def title(self) -> str:
        return f"fp8rl {self.cfg.tier} report"


def load_report_data(cfg: ExperimentConfig, runs_dir: Path, paths: ReportPaths, root: Path) -> ReportData:
    """Load `cfg`'s runs from `runs_dir` and compute what the builders share; `root`: the tier's results
    folder (its SFT bases, for the base models table); unreadable bases join the data problems."""
    runset = load_tier(cfg, runs_dir)
    endpoints = endpoints_table(runset, cfg, runs_dir)
    comparison = comparison_table(runset, endpoints)
    control = control_table(endpoints)
    return ReportData(
        cfg=cfg,
        runset=runset,
        runs_dir=runs_dir,
        paths=paths,
        keys=eval_keys(runset),
        comparison=comparison,
        endpoints=endpoints,
        control=control,
        control_info=control_summary(control),
        throughput=throughput_table(runset),
        runs=runs_table(runset),
        bases=base_model_table(root, runset.problems),
        counts={s: int((runset.runs["status"] == s).sum()) for s in STATUSES},
        notes=zero_width_notes(comparison),
        numerics=runs_numerics(runs_dir),
    )


def control_section(data: ReportData) -> Section:
    """Did the bf16 control learn (fp8rl.report.control)."""
    notes = [data.control_info["statement"], *CONTROL_NOTES]
    view = control_view(data.control)
    return [
        ReportTable("control", "Did the bf16 control learn?", "bf16 control", view, notes, data.control)
    ], []


def acceptance_section(data: ReportData) -> Section:
    """A testbed's bf16-only acceptance, per run and over the bases (fp8rl.report.acceptance)."""
    if not data.paths.acceptance:
        return [], []
    from fp8rl.report.acceptance import acceptance_from_report, acceptance_notes, acceptance_table

    result = acceptance_from_report(data.cfg, data.endpoints, data.runset)
    table = acceptance_table(result)
    notes = acceptance_notes(data.cfg, result)
    return [ReportTable("acceptance", "Testbed acceptance (bf16 only)", "acceptance", numbers_view(table),
                        notes, table)], []  # fmt: skip


def study_report_tables(cfg: ExperimentConfig, endpoints: pd.DataFrame, control: dict) -> list[ReportTable]:
    """The planned, exploratory and arms tables of a config with a `study` section, in that order. Where
    the control did not learn (`control`: report.json's) the contrasts' notes say the comparison is
    void, and so does each planned decision of the view: because no control run finished where none
    did (`control.never_ran`), else because the control did not learn."""
    from fp8rl.report.planned import SECTION_TITLES, study_tables

    tables = study_tables(endpoints, cfg)
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


def study_section(data: ReportData) -> Section:
    """A pre-registered study's planned, exploratory and arms tables (fp8rl.report.planned), with the
    figure of each arm's endpoint (fp8rl.report.study_endpoint)."""
    if not data.paths.study:
        return [], []
    from fp8rl.report.planned import arm_endpoints
    from fp8rl.report.study_endpoint import write_study_endpoint_plot

    tables = study_report_tables(data.cfg, data.endpoints, data.control_info)
    arms = next(t.frame for t in tables if t.name == "arms")
    per_arm = arm_endpoints(data.endpoints, data.cfg)
    return tables, captioned(write_study_endpoint_plot(arms, per_arm, data.cfg, data.paths.plots_dir))


def secondary_section(data: ReportData) -> Section:
    """The study re-read on the held-out bf16 endpoint (fp8rl.report.secondary)."""
    if not data.paths.heldout:
        return [], []
    from fp8rl.report.secondary import secondary_notes, secondary_table, secondary_view

    table = secondary_table(data.endpoints, data.cfg)
    multiplicity = data.cfg.study.multiplicity
    notes = void_notes(data.control_info, secondary_notes(multiplicity))
    title = "Secondary analysis: the held-out bf16 endpoint"
    view = secondary_view(table, multiplicity)
    return [ReportTable("secondary", title, "secondary analysis", view, notes, table,
                        float_format=FLOAT_FORMAT)], []  # fmt: skip


def survival_section(data: ReportData) -> Section:
    """The time to divergence per arm of a study (fp8rl.report.study_survival), with
    its figure and the reward-gap figure (fp8rl.report.study_gap)."""
    if not data.paths.survival:
        return [], []
    from fp8rl.report.planned import arm_runs
    from fp8rl.report.stability import run_stability
    from fp8rl.report.stability_plots import write_study_survival_plot
    from fp8rl.report.study_gap import reward_gaps, write_study_gap_plot
    from fp8rl.report.study_survival import NOTES, survival_table, survival_view

    cfg, plots_dir = data.cfg, data.paths.plots_dir
    per_arm = arm_runs(run_stability(data.endpoints, cfg), cfg)
    table = survival_table(data.runset, per_arm, cfg)
    title = "Study arms: time to divergence"
    tables = [ReportTable("study_survival", title, "study arms, time to divergence", survival_view(table),
                          NOTES, table)]  # fmt: skip
    figures = write_study_survival_plot(per_arm, list(cfg.study.arms), plots_dir)
    figures |= write_study_gap_plot(reward_gaps(data.runset, cfg), cfg, plots_dir)
    return tables, captioned(figures)


def failure_search_section(data: ReportData) -> Section:
    """A failure search's rule read per setting off the study's survival and planned tables, with the
    decision in its notes (fp8rl.report.failure_search)."""
    if not data.paths.failure_search:
        return [], []
    from fp8rl.report.failure_search import decide_from, search_notes, search_table, search_view
    from fp8rl.report.planned import arm_runs, study_tables
    from fp8rl.report.stability import run_stability
    from fp8rl.report.study_survival import survival_table

    cfg = data.cfg
    survival = survival_table(data.runset, arm_runs(run_stability(data.endpoints, cfg), cfg), cfg)
    planned = study_tables(data.endpoints, cfg)["planned"][0]
    table = search_table(decide_from(cfg, survival, planned))
    notes = void_notes(data.control_info, search_notes(cfg, table))
    return [ReportTable("failure_search", "The failure search", "failure search", search_view(table), notes,
                        table, escape=True)], []  # fmt: skip


def stability_section(data: ReportData) -> Section:
    """The stability and breaking-dose tables of a tier with a noise axis (fp8rl.report.stability), with
    their figures; a void comparison is said in the notes."""
    if not data.paths.stability:
        return [], []
    from fp8rl.report.paths import noise_axis
    from fp8rl.report.stability import (
        BREAKING_NOTES,
        KL_AXIS_NOTE,
        STABILITY_NOTES,
        breaking_dose_table,
        breaking_view,
        run_stability,
        stability_table,
        stability_view,
    )
    from fp8rl.report.stability_plots import write_stability_plots

    axis = noise_axis(data.cfg)
    per_run = run_stability(data.endpoints, data.cfg, axis)
    table = stability_table(per_run, axis)
    breaking = breaking_dose_table(table)
    void = data.control_info
    axis_notes = [] if axis == "noise_scale" else [KL_AXIS_NOTE]
    tables = [
        ReportTable("stability", "Stability", "stability", stability_view(table, axis),
                    void_notes(void, [*STABILITY_NOTES, *axis_notes]), table),
        ReportTable("breaking_dose", "Breaking dose", "breaking dose", breaking_view(breaking),
                    void_notes(void, [*BREAKING_NOTES, *axis_notes]), breaking),
    ]  # fmt: skip
    figures = write_stability_plots(data.runset, per_run, table, data.paths.plots_dir, axis)
    return tables, captioned(figures, axis)


def failure_text_section(data: ReportData) -> Section:
    """A tier that logs samples: every diverged run's text at step 1 and at its failure
    (fp8rl.report.failure_text)."""
    if not data.paths.samples:
        return [], []
    from fp8rl.report.failure_text import failure_text_notes, failure_text_table

    table = failure_text_table(data.endpoints, data.runs_dir)
    view = table.astype(object).where(table.notna(), "").astype(str)
    return [ReportTable("failure_text", "Text at failure", "text at failure", view, failure_text_notes(table),
                        table, escape=True)], []  # fmt: skip


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


def deviations_section(data: ReportData) -> Section:
    """How runs deviate from the requested setup (an HTML section only, where any run recorded one)."""
    table = deviations_table(data.runset)
    if table.empty:
        return [], []
    return [ReportTable(None, "Deviations from the requested setup", "", table, DEVIATION_NOTES)], []


def comparison_section(data: ReportData) -> Section:
    """Every variant against bf16 (fp8rl.report.comparison), its paired FP8-vs-shadow part, and the
    figures every report has (fp8rl.report.plots)."""
    from fp8rl.report.plot_base import arm_names
    from fp8rl.report.plots import write_plots

    cfg = data.cfg
    view = comparison_view(data.comparison, data.keys)
    paired = paired_view(data.comparison)
    notes = seed_unit_notes(cfg.study, void_notes(data.control_info, COMPARISON_NOTES))
    text = comparison_markdown(f"{data.title}: comparison", view, paired, notes)
    tables = [
        ReportTable("comparison", "Comparison", "comparison", view, notes, data.comparison, markdown=text),
        ReportTable(None, "Paired: FP8 vs its BF16 shadow", "", paired, PAIRED_NOTES),
    ]
    one_per_algo = {r.algo: r for r in cfg.runs()}.values()
    clip_bounds = {r.algo: resolve_run(cfg, r).bounds for r in one_per_algo}
    names = arm_names(cfg.study.arms) if cfg.study is not None else None
    figures = write_plots(
        data.runset, data.comparison, data.keys, data.throughput, data.paths.plots_dir, clip_bounds, names
    )
    return tables, captioned(figures)


def mechanism_section(data: ReportData) -> Section:
    """A matrix with FP8 conditions: the mismatch per setting (fp8rl.report.mismatch_table) and excess
    clipping per condition (fp8rl.report.mechanism), with the mechanism figures."""
    if not data.paths.mechanism:
        return [], []
    from fp8rl.report.mechanism import MECHANISM_NOTES, mechanism_plots, mechanism_table, mechanism_view
    from fp8rl.report.mismatch_table import NOTES as MISMATCH_NOTES
    from fp8rl.report.mismatch_table import mismatch_table, mismatch_view

    cfg = data.cfg
    mismatch = mismatch_table(data.endpoints, cfg)
    mechanism = mechanism_table(data.comparison, data.endpoints, cfg)
    notes = seed_unit_notes(cfg.study, void_notes(data.control_info, MECHANISM_NOTES))
    tables = [
        ReportTable("mismatch", "Mismatch in the field's units per setting", "mismatch calibration",
                    mismatch_view(mismatch), MISMATCH_NOTES, mismatch, float_format=FLOAT_FORMAT),
        ReportTable("mechanism", "Mechanism: excess clipping vs FP8 condition", "mechanism",
                    mechanism_view(mechanism), notes, mechanism),
    ]  # fmt: skip
    return tables, captioned(mechanism_plots(mechanism, data.paths.plots_dir))


def closing_section(data: ReportData) -> Section:
    """The base models, throughput, per-run endpoints and the runs table, which every report ends on."""
    status_note = [", ".join(f"{s}: {n}" for s, n in data.counts.items())]
    return [
        ReportTable("base_models", "Base models", "base models", data.bases, BASE_NOTES, data.bases),
        ReportTable("throughput", "Throughput", "throughput", numbers_view(data.throughput), THROUGHPUT_NOTES,
                    data.throughput),
        ReportTable("endpoints", "Per-run endpoints", "per-run endpoints", endpoints_view(data.endpoints),
                    endpoint_notes(data.cfg), data.endpoints, float_format=FLOAT_FORMAT, escape=True),
        ReportTable("runs", None, "runs", data.runs, status_note, data.runs, escape=True),
    ], []  # fmt: skip


# In the order of the report. The figures are drawn in this order, and shown core first, then the
# mechanism's, then the rest (`figure_order`).
BUILDERS: tuple[Callable[[ReportData], Section], ...] = (
    control_section,
    acceptance_section,
    study_section,
    secondary_section,
    survival_section,
    heldout_curve_section,
    failure_search_section,
    stability_section,
    failure_text_section,
    deviations_section,
    comparison_section,
    mechanism_section,
    closing_section,
)


def build_sections(data: ReportData) -> Section:
    """Every builder's tables, in report order, and their figures, in the page's order."""
    from fp8rl.report.figures import CORE, MECHANISM

    tables: list[ReportTable] = []
    figures: list[Figure] = []
    for builder in BUILDERS:
        t, f = builder(data)
        tables += t
        figures += f
    rank = {name: 0 for name in CORE} | {name: 1 for name in MECHANISM}
    return tables, sorted(figures, key=lambda fig: rank.get(fig[0].stem, 2))
