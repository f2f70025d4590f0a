"""Reports of a tier: comparison tables with CIs, stability diagnostics, throughput, plots, HTML.

`fp8rl report --config FILE [--set ...]` (the DAG's last rule) reads every run of the config's matrix
from `{results_dir}/{tier}/runs/` and writes, with `R = {results_dir}/{tier}`:

    R/tables/runs.csv, runs.md               one row per matrix cell: status ok|diverged|failed|missing,
                                             reason, last step, malformed metrics lines
    R/tables/endpoints.csv, endpoints.md     one row per run: base, seed, variant, condition, status and
                                             divergence, first/last-window reward and entropy, gibberish,
                                             every per-run value the intervals use (endpoints.py)
    R/tables/control.csv, control.md         did the bf16 control learn: reward rise with a t-interval
                                             over bases or seeds, learned|flat|fell (control.py)
    R/tables/comparison.csv, comparison.md   per (algo, model, granularity[, condition]) and variant:
                                             eval scores as mean and 95% Student-t CI over seeds, Δ vs
                                             bf16 (Welch t), final/best reward, peak entropy over its
                                             early baseline, clip/low_neg and mismatch KL with
                                             t-CIs over the seeds' step means (clip/low_neg also Δ
                                             vs bf16, Welch t), proportions' CIs cut to [0, 1],
                                             the paired section (phantom/low_neg, phantom/missed_neg,
                                             excess clipping), status counts
    R/tables/throughput.csv, throughput.md   tokens/s per phase, step time, speedup vs bf16,
                                             calibration overhead %, emulated vs hardware
    R/tables/mechanism.csv, mechanism.md     matrices with FP8 conditions only: per condition ×
                                             granularity × fp8/fp8_calib, excess clipping, clip/low_neg
                                             vs bf16, mismatch KL, calibrated bounds (mechanism.py)
    R/plots/{entropy,clip_low_neg,ratio_tails,ratio_hist,eval_scores,throughput}.{png,svg}
    R/plots/{mechanism_excess_clip,mechanism_mismatch_kl}.{png,svg}   (with FP8 conditions only)
    R/report.html                            self-contained (plots embedded as base64 PNG)
    R/report.json                            manifest: status counts, data problems, config digest,
                                             `control` (the bf16 control check), the list of outputs
                                             and their sha256 (`files`)

The report is built in a temp folder and moved into place with report.json last (`build.py`).
`fp8rl publish --config FILE` copies tables/, plots/, report.html and a provenance.json into
`{results_dir}/published/{TIER}/` if every output has the hash report.json records, and swaps the copy
in whole (fp8rl.publication.publish); the figures README.md and docs/ quote are read off the
publications by fp8rl.quotes. Neither is imported by the report.

Modules: `paths` (file names), `load` (run directories → tidy frames), `endpoints` (one row per run:
every per-run value the other tables aggregate over seeds), `pipeline` (the runs loaded once, one builder
per part of the report), `writer` (the one table writer), `control` (the bf16 control check), `stats`
(every interval and test: t-intervals over seeds, Welch, Holm, exact intervals and Fisher's test of
counts; the range of each metric), `binomial` (the dose-response fit of divergence counts), `summaries`
(eval keys, the entropy peak over its baseline), `comparison`, `throughput_table`, `mechanism` (tables),
`markdown` (formatted views), `formats` (how a figure is printed), `summary_page` (SUMMARY.md) and
`findings` (what it and the quoted blocks of README.md and docs/ both say), `plots`, `html`, `build`
(`build_report`).
"""

from fp8rl.report.paths import PLOTS, TABLES, ReportPaths, report_outputs

__all__ = ["PLOTS", "TABLES", "ReportPaths", "report_outputs"]
