"""Reports of a tier: comparison tables with CIs, stability diagnostics, throughput, plots, HTML.

`fp8rl report --config FILE [--set ...]` (the DAG's last rule) reads every run of the config's matrix
from `{results_dir}/{tier}/runs/` and writes, with `R = {results_dir}/{tier}`:

    R/tables/runs.csv, runs.md               one row per matrix cell: status ok|diverged|failed|missing,
                                             reason, last step, malformed metrics lines
    R/tables/comparison.csv, comparison.md   per (algo, model, granularity) and variant: eval scores as
                                             mean and 95% Student-t CI over seeds, Δ vs bf16 (Welch t),
                                             final/best reward, peak entropy, clip/low_neg,
                                             phantom/low_neg, mismatch KL, status counts
    R/tables/throughput.csv, throughput.md   tokens/s per phase, step time, speedup vs bf16,
                                             calibration overhead %, emulated vs hardware
    R/plots/{entropy,clip_low_neg,ratio_tails,ratio_hist,eval_scores,throughput}.{png,svg}
    R/report.html                            self-contained (plots embedded as base64 PNG)
    R/report.json                            manifest: status counts, data problems, config digest,
                                             the list of outputs

`fp8rl publish TIER [--config FILE]` copies tables/, plots/, report.html and a provenance.json into
`{results_dir}/published/{TIER}/`, atomically (see `publish.py`).

Modules: `paths` (file names), `load` (run directories → tidy frames), `stats` (t-intervals),
`summaries` (per-run reductions), `comparison`, `throughput_table` (tables), `markdown` (formatted views),
`plots`, `html`, `build` (`build_report`), `publish` (`publish_tier`).
"""

from fp8rl.report.paths import PLOTS, TABLES, ReportPaths, report_outputs

__all__ = ["PLOTS", "TABLES", "ReportPaths", "report_outputs"]
