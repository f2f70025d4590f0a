"""Where a tier's report lives: every file name `fp8rl report` writes, in one place.

The Snakemake report rule lists these as its outputs (`report_outputs(...)`), and `fp8rl publish`
copies them; docs/interfaces.md repeats the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fp8rl.rundir import RUNS_DIR

# tables/{name}.csv and tables/{name}.md
TABLES = ("runs", "comparison", "throughput")
# plots/{name}.png and plots/{name}.svg
PLOTS = ("entropy", "clip_low_neg", "ratio_tails", "ratio_hist", "eval_scores", "throughput")
PLOT_FORMATS = ("png", "svg")
# Tiers with a dose axis (matrix.noise_scales) add the stability report (fp8rl.report.stability).
STABILITY_TABLES = ("stability", "breaking_dose")
STABILITY_PLOTS = ("survival", "stability_curves", "breaking_dose")


@dataclass(frozen=True)
class ReportPaths:
    """The report files of one tier, under `{results_dir}/{tier}`."""

    root: Path

    @classmethod
    def for_tier(cls, results_dir: str | Path, tier: str) -> ReportPaths:
        return cls(Path(results_dir) / tier)

    @property
    def runs_dir(self) -> Path:
        return self.root / RUNS_DIR

    @property
    def tables_dir(self) -> Path:
        return self.root / "tables"

    @property
    def plots_dir(self) -> Path:
        return self.root / "plots"

    @property
    def html(self) -> Path:
        return self.root / "report.html"

    @property
    def manifest(self) -> Path:
        """report.json: run counts, data problems, config digest and the list of outputs."""
        return self.root / "report.json"

    def table(self, name: str, ext: str) -> Path:
        return self.tables_dir / f"{name}.{ext}"

    def plot(self, name: str, ext: str) -> Path:
        return self.plots_dir / f"{name}.{ext}"

    def outputs(self, stability: bool = False) -> list[Path]:
        """Every file `fp8rl report` writes, in a stable order (`stability`: a tier with a dose axis)."""
        tables = (*TABLES, *STABILITY_TABLES) if stability else TABLES
        plots = (*PLOTS, *STABILITY_PLOTS) if stability else PLOTS
        out = [self.table(t, ext) for t in tables for ext in ("csv", "md")]
        out += [self.plot(p, ext) for p in plots for ext in PLOT_FORMATS]
        return [*out, self.html, self.manifest]


def report_outputs(results_dir: str | Path, tier: str, stability: bool = False) -> list[str]:
    """The report rule's output paths as strings (for a Snakefile)."""
    return [str(p) for p in ReportPaths.for_tier(results_dir, tier).outputs(stability)]
