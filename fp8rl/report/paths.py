"""Where a tier's report lives: every file name `fp8rl report` writes, in one place.

The Snakemake report rule lists these as its outputs (`report_outputs(...)`), and `fp8rl publish`
copies them; docs/interfaces.md repeats the list. A matrix with FP8 conditions (`matrix.conditions`)
also gets the mechanism study's table and figures (`MECHANISM_TABLES`, `MECHANISM_PLOTS`), a noise axis
(a noise-dose or a target-KL sweep) the stability report, a `study` section its tables and its survival
per arm (`SURVIVAL_TABLES`, `SURVIVAL_PLOTS`): build the paths with `ReportPaths.for_config(cfg)`, or
pass the flags explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fp8rl.report.figures import (
    CORE,
    HELDOUT_CURVE,
    MECHANISM,
    STABILITY,
    STUDY_ENDPOINT,
    STUDY_GAP,
    STUDY_SURVIVAL,
)
from fp8rl.run_files import RUNS_DIR, RootPath
from fp8rl.vocabulary import NO_CONDITION

if TYPE_CHECKING:
    from fp8rl.config import ExperimentConfig

# tables/{name}.csv and tables/{name}.md; `endpoints`: one row per run (fp8rl.report.endpoints), `control`:
# whether the bf16 control learned (fp8rl.report.control)
TABLES = ("runs", "endpoints", "control", "comparison", "base_models", "throughput")
# plots/{name}.png and plots/{name}.svg (fp8rl.report.figures: names and captions)
PLOTS = tuple(CORE)
PLOT_FORMATS = ("png", "svg")
# only for matrices with FP8 conditions: the mechanism table (fp8rl.report.mechanism) and the mismatch
# calibration table (fp8rl.report.mismatch_table)
MECHANISM_TABLES = ("mechanism", "mismatch")
MECHANISM_PLOTS = tuple(MECHANISM)
# only for matrices with a noise axis (conditions that differ only in fp8.noise_scale or only in
# fp8.target_kl: `noise_axis`): the stability report (fp8rl.report.stability)
STABILITY_TABLES = ("stability", "breaking_dose")
STABILITY_PLOTS = tuple(STABILITY)
# only for configs with a `study` section (a pre-registered study tier: fp8rl.report.planned)
STUDY_TABLES = ("arms", "planned", "exploratory")
STUDY_PLOTS = tuple(STUDY_ENDPOINT)  # each arm's endpoint (fp8rl.report.study_endpoint)
# only for a study: time to divergence per arm (fp8rl.report.study_survival) and each arm's reward gap to the control per
# step (fp8rl.report.study_gap)
SURVIVAL_TABLES = ("study_survival",)
SURVIVAL_PLOTS = (*STUDY_SURVIVAL, *STUDY_GAP)
# only for a study with the held-out bf16 endpoint (`eval.heldout`): its secondary analysis
# (fp8rl.report.secondary)
HELDOUT_TABLES = ("secondary",)
# only for a tier that logs samples (`schedule.log_samples`): the text of every diverged run at its failure
# (fp8rl.report.failure_text)
SAMPLES_TABLES = ("failure_text",)
# only for a testbed with an `acceptance` section: its bf16-only acceptance (fp8rl.report.acceptance)
ACCEPTANCE_TABLES = ("acceptance",)
# only for a study with a `failure_search` section: the search's rule read off its tables per setting
# (fp8rl.report.failure_search)
FAILURE_SEARCH_TABLES = ("failure_search",)
# only for a tier that keeps checkpoints (`schedule.keep_every`) and has the held-out endpoint: the held-out
# endpoint over training per arm (fp8rl.report.heldout_curve)
HISTORY_TABLES = ("heldout_curve",)
HISTORY_PLOTS = tuple(HELDOUT_CURVE)


@dataclass(frozen=True)
class ReportPaths:
    """The report files of one tier, under `{results_dir}/{tier}`."""

    root: Path
    mechanism: bool = False  # the matrix has FP8 conditions: the mechanism table and plots too
    stability: bool = False  # the conditions vary the noise dose or the target KL: the stability report too
    study: bool = False  # the config pre-registers a study: its arms and planned contrasts too
    heldout: bool = False  # the study has the held-out bf16 endpoint: its secondary analysis too
    acceptance: bool = False  # the config has an `acceptance` section: its table too
    samples: bool = False  # the runs log samples: the text at failure too
    failure_search: bool = False  # the study is a failure search: its rule per setting and decision too
    history: bool = False  # kept checkpoints scored on the held-out endpoint: its curve per arm too

    @classmethod
    def for_tier(
        cls,
        results_dir: str | Path,
        tier: str,
        *,
        mechanism: bool = False,
        stability: bool = False,
        study: bool = False,
        heldout: bool = False,
        acceptance: bool = False,
        samples: bool = False,
        failure_search: bool = False,
        history: bool = False,
    ) -> ReportPaths:
        return cls(
            Path(results_dir) / tier,
            mechanism,
            stability,
            study,
            heldout and study,
            acceptance,
            samples,
            failure_search and study,
            history,
        )

    @classmethod
    def for_config(cls, cfg: ExperimentConfig) -> ReportPaths:
        return cls.for_tier(cfg.results_dir, cfg.tier, **report_flags(cfg))

    runs_dir = RootPath(RUNS_DIR)
    tables_dir = RootPath("tables")
    plots_dir = RootPath("plots")
    html = RootPath("report.html")
    summary = RootPath("SUMMARY.md", "SUMMARY.md: the tier on one page (fp8rl.report.summary_page)")
    manifest = RootPath(
        "report.json", "report.json: run counts, data problems, config digest and the outputs"
    )
    lock_file = RootPath(
        "report.lock",
        "report.lock: held by `fp8rl report` and `fp8rl publish` while they read or write the report",
    )

    @property
    def survival(self) -> bool:
        """A study: its time to divergence per arm (`SURVIVAL_TABLES`/`_PLOTS`), beside the stability
        report's per-setting survival when the study also has a noise axis."""
        return self.study

    def table(self, name: str, ext: str) -> Path:
        return self.tables_dir / f"{name}.{ext}"

    def plot(self, name: str, ext: str) -> Path:
        return self.plots_dir / f"{name}.{ext}"

    def outputs(self) -> list[Path]:
        """Every file `fp8rl report` writes, in a stable order."""
        tables = (
            TABLES
            + (MECHANISM_TABLES if self.mechanism else ())
            + (STABILITY_TABLES if self.stability else ())
            + (STUDY_TABLES if self.study else ())
            + (SURVIVAL_TABLES if self.survival else ())
            + (HELDOUT_TABLES if self.heldout else ())
            + (ACCEPTANCE_TABLES if self.acceptance else ())
            + (SAMPLES_TABLES if self.samples else ())
            + (FAILURE_SEARCH_TABLES if self.failure_search else ())
            + (HISTORY_TABLES if self.history else ())
        )
        plots = (
            PLOTS
            + (MECHANISM_PLOTS if self.mechanism else ())
            + (STABILITY_PLOTS if self.stability else ())
            + (SURVIVAL_PLOTS if self.survival else ())
            + (STUDY_PLOTS if self.study else ())
            + (HISTORY_PLOTS if self.history else ())
        )
        out = [self.table(t, ext) for t in tables for ext in ("csv", "md")]
        out += [self.plot(p, ext) for p in plots for ext in PLOT_FORMATS]
        return [*out, self.summary, self.html, self.manifest]


# the FP8 settings a stability report can sweep: the fp8 key its conditions vary -> what it is called
NOISE_AXES = {"noise_scale": "dose", "target_kl": "target KL"}


def noise_axis(cfg: ExperimentConfig) -> str | None:
    """The fp8 key the matrix's conditions are an axis of: `noise_scale` (a noise-dose sweep, the stress
    tier) or `target_kl` (a mismatch sweep, each setting searched for its per-token KL: the longform
    tier's failure search), when the conditions differ in that key and in nothing else, at more than one
    value; None otherwise (the mechanism tier also varies format and KV cache, and has its own table)."""
    settings = [cfg.fp8_for(c.name).model_dump() for c in cfg.matrix.conditions]
    for key in NOISE_AXES:
        rest = [{k: v for k, v in s.items() if k != key} for s in settings]
        if len({s.get(key) for s in settings}) > 1 and all(r == rest[0] for r in rest):
            return key
    return None


def report_flags(cfg: ExperimentConfig) -> dict[str, bool]:
    """Which optional parts a tier's report has: `mechanism` (fp8 runs under FP8 conditions; none while a
    conditions matrix has only its bf16 runs), `stability` (those conditions are a noise axis:
    `noise_axis`), `study` (a pre-registered study section, with its survival per arm), `heldout` (a
    study with the held-out endpoint), `acceptance` (a testbed's acceptance section), `samples` (the runs
    log samples: the text at failure), `failure_search` (a study with a failure rule), `history` (the
    held-out endpoint of every kept checkpoint: `eval.heldout` and `schedule.keep_every`)."""
    mechanism = any(r.condition not in (None, NO_CONDITION) for r in cfg.runs())
    return {
        "mechanism": mechanism,
        "stability": mechanism and noise_axis(cfg) is not None,
        "study": cfg.study is not None,
        # a re-read on the held-out endpoint, unless the study's own endpoint is already a held-out one
        "heldout": cfg.study is not None
        and cfg.eval.heldout is not None
        and not cfg.study.endpoint.metric.startswith("heldout/"),
        "acceptance": cfg.acceptance is not None,
        "samples": bool(cfg.schedule.log_samples),
        "failure_search": cfg.study is not None and cfg.failure_search is not None,
        "history": cfg.eval.heldout is not None and cfg.schedule.keep_every is not None,
    }


def report_outputs(
    results_dir: str | Path,
    tier: str,
    *,
    mechanism: bool = False,
    stability: bool = False,
    study: bool = False,
    heldout: bool = False,
    acceptance: bool = False,
    samples: bool = False,
    failure_search: bool = False,
    history: bool = False,
) -> list[str]:
    """The report rule's output paths as strings (for a Snakefile); `mechanism`: the matrix has FP8
    conditions; `stability`: they are a noise axis (`noise_axis`); `study`: the config has a `study`
    section, with its survival per arm (`report_flags` gives every flag for a config)."""
    paths = ReportPaths.for_tier(
        results_dir,
        tier,
        mechanism=mechanism,
        stability=stability,
        study=study,
        heldout=heldout,
        acceptance=acceptance,
        samples=samples,
        failure_search=failure_search,
        history=history,
    )
    return [str(p) for p in paths.outputs()]
