# The evaluation suites (fp8rl.evaluate.suites: lm-eval, the agent benchmark, the held-out bf16
# endpoint, ...) on every run's final checkpoint, one result file per suite (docs/interfaces.md schema).
# The suites come from the registry, so a new suite needs no edit here. Per run, one job per image:
# on the host (containers off: a laptop, CI) rule `eval` runs every suite of the run in one process
# (`fp8rl eval run`: one process start and one set of imports per run, not per suite); with images
# (the cluster path) each suite's image is a job of its own, and a suite alone in its image keeps its
# own rule and command (`eval_lm`: `fp8rl eval lm-eval`, `eval_agent`, `eval_heldout`). A harness that
# crashes on a job's last attempt is recorded in the result file (`failed`) instead of failing the job,
# so one broken eval does not hold back the report, which lists it.
from fp8rl.evaluate.suites import eval_jobs

EVAL_JOBS = eval_jobs(CFG, in_image)
# Snakemake starts the ready jobs of higher priority first, and without one it would run every training
# before any evaluation. An evaluation is minutes and a training up to hours, so a run is evaluated as
# soon as it has trained: a study that spans sessions then has each finished run evaluated at a session's
# stop, so `fp8rl archive save` can keep it (it keeps evaluated runs only).
EVAL_PRIORITY = 10


for _job in EVAL_JOBS:
    _trigger = ConfigTrigger(
        _job.rule, RUN_DIR.eval_file(_job.suites[0].name), section_digest(*_job.sections)
    )

    rule:
        name: _job.rule
        input:
            changed=_trigger.changed,
            summary=str(RUN_DIR.summary),
            images=container_inputs(_job.role),
            data=[getattr(rules.data.output, d) for d in dict.fromkeys(s.data for s in _job.suites)],
        output:
            **{s.name: str(RUN_DIR.eval_file(s.name)) for s in _job.suites},
            **{
                f"{s.name}_{i}": str(extra)
                for s in _job.suites
                for i, extra in enumerate(s.extra_outputs(RUN_DIR.eval_file(s.name)))
            },
        params:
            config=CONFIG_FILE,
            checkpoint=lambda wildcards, input: RunDir(Path(input.summary).parent).checkpoint,
            data=lambda wildcards, input: Path(input.data[0]).parent,
            out_dir=lambda wildcards, output: Path(output[0]).parent,
            **_trigger.params(),
        log:
            f"{R}/logs/{_job.rule}/{RUN}.log",
        benchmark:
            f"{R}/benchmarks/{_job.rule}/{RUN}.tsv"
        priority: EVAL_PRIORITY
        threads: threads_for(_job.rule)
        resources:
            **resources_for(_job.rule),
            eval_on_failure=eval_on_failure(_job.rule),
        retries: rule_retries(_job.rule) if _job.records_failures else 0
        conda:
            CONDA_ENV
        shell:
            eval_command(_job)


# A suite that scores bases too (`per_base`: the held-out endpoint) scores each base the runs start
# from, so every run's gain over its own base is in endpoints.csv.
for _suite in (s for job in EVAL_JOBS for s in job.suites if s.per_base):
    _trigger = ConfigTrigger(
        f"{_suite.rule}_base", f"{R}/base/{{base}}/eval/{_suite.name}.json", section_digest(*_suite.sections)
    )

    rule:
        name: f"{_suite.rule}_base"
        input:
            changed=_trigger.changed,
            base=lambda wildcards: base_record(*base_model_seed(wildcards.base)),
            data=getattr(rules.data.output, _suite.data),
            images=container_inputs(_suite.role),
        output:
            f"{R}/base/{{base}}/eval/{_suite.name}.json",
        wildcard_constraints:
            base=r"[^/]+(/seed\d+)?",
        params:
            config=CONFIG_FILE,
            checkpoint=lambda wildcards, input: Path(input.base).parent,
            data=lambda wildcards, input: Path(input.data).parent,
            **_trigger.params(),
        log:
            f"{R}/logs/{_suite.rule}/base/{{base}}.log",
        benchmark:
            f"{R}/benchmarks/{_suite.rule}/base/{{base}}.tsv"
        priority: EVAL_PRIORITY
        threads: threads_for(_suite.rule)
        resources:
            **resources_for(_suite.rule),
        conda:
            CONDA_ENV
        shell:
            eval_base_command(_suite)
