# The tier's tables, plots and report.html from every run (fp8rl.report.paths names the files).
# The outputs are also registered for Snakemake's own report (`snakemake --report report.zip` after a
# run): CSV tables, PNG figures and the project's report.html (`registered`, common.smk), with the
# captions of workflows/report/.

from fp8rl.report.paths import ReportPaths, report_flags, report_outputs

# The study tiers' extra outputs: the mechanism table (FP8 conditions), the stability report (a dose
# axis), the planned contrasts (a `study` section).
REPORT_FLAGS = report_flags(CFG)


report: "report/workflow.rst"


REPORT_TRIGGER = ConfigTrigger(
    "report",
    ReportPaths.for_tier(CFG.results_dir, CFG.tier, **REPORT_FLAGS).manifest,
    section_digest("matrix", "eval", "stability"),
)


rule report:
    input:
        changed=REPORT_TRIGGER.changed,
        summaries=[str(run_dir(spec).summary) for spec in RUNS],
        evals=[path for spec in RUNS for path in eval_targets(spec)],
        heldout_bases=heldout_base_targets(),
        images=container_inputs("report"),
    output:
        [registered(path) for path in report_outputs(CFG.results_dir, CFG.tier, **REPORT_FLAGS)],
    params:
        config=CONFIG_FILE,
        **REPORT_TRIGGER.params(),
    log:
        f"{R}/logs/report/report.log",
    benchmark:
        f"{R}/benchmarks/report/report.tsv"
    threads: threads_for("report")
    resources:
        **resources_for("report"),
    conda:
        CONDA_ENV
    shell:
        in_image("report") + "fp8rl report --config {params.config:q} > {log:q} 2>&1"
        + RECORD_DIGEST
