# lm-eval and the agent benchmark on every run's final checkpoint (docs/interfaces.md result schema);
# eval_lm also keeps every scored sample beside its scores (lm_eval.samples.jsonl). A harness that crashes
# on a job's last attempt is recorded in the result file (`failed`) instead of failing the job, so one
# broken eval does not hold back the report, which lists it.
from fp8rl.evaluate.schema import samples_path


EVAL_LM_TRIGGER = ConfigTrigger(
    "eval_lm",
    RUN_DIR.eval_file("lm_eval"),
    section_digest("numerics", "eval", "backend"),
)


rule eval_lm:
    input:
        changed=EVAL_LM_TRIGGER.changed,
        summary=str(RUN_DIR.summary),
        test=rules.data.output.test,
        images=container_inputs("eval"),
    output:
        scores=str(RUN_DIR.eval_file("lm_eval")),
        samples=str(samples_path(RUN_DIR.eval_file("lm_eval"))),
    params:
        config=CONFIG_FILE,
        checkpoint=lambda wildcards, input: RunDir(Path(input.summary).parent).checkpoint,
        data=lambda wildcards, input: Path(input.test).parent,
        **EVAL_LM_TRIGGER.params(),
    log:
        f"{R}/logs/eval_lm/{RUN}.log",
    benchmark:
        f"{R}/benchmarks/eval_lm/{RUN}.tsv"
    threads: threads_for("eval_lm")
    resources:
        **resources_for("eval_lm"),
        eval_on_failure=eval_on_failure("eval_lm"),
    retries: rule_retries("eval_lm")
    conda:
        CONDA_ENV
    shell:
        in_image("eval") + "fp8rl eval lm-eval --config {params.config:q} --checkpoint {params.checkpoint:q}"
        " --data {params.data:q} --out {output.scores:q} --on-failure {resources.eval_on_failure:q}"
        " > {log:q} 2>&1"
        + RECORD_DIGEST


EVAL_AGENT_TRIGGER = ConfigTrigger(
    "eval_agent",
    RUN_DIR.eval_file("agent"),
    section_digest("numerics", "eval", "backend"),
)


rule eval_agent:
    input:
        changed=EVAL_AGENT_TRIGGER.changed,
        summary=str(RUN_DIR.summary),
        tool=rules.data.output.tool,
        images=container_inputs("agent"),
    output:
        str(RUN_DIR.eval_file("agent")),
    params:
        config=CONFIG_FILE,
        checkpoint=lambda wildcards, input: RunDir(Path(input.summary).parent).checkpoint,
        data=lambda wildcards, input: Path(input.tool).parent,
        **EVAL_AGENT_TRIGGER.params(),
    log:
        f"{R}/logs/eval_agent/{RUN}.log",
    benchmark:
        f"{R}/benchmarks/eval_agent/{RUN}.tsv"
    threads: threads_for("eval_agent")
    resources:
        **resources_for("eval_agent"),
        eval_on_failure=eval_on_failure("eval_agent"),
    retries: rule_retries("eval_agent")
    conda:
        CONDA_ENV
    shell:
        in_image("agent") + "fp8rl eval agent --config {params.config:q} --checkpoint {params.checkpoint:q}"
        " --data {params.data:q} --out {output:q} --on-failure {resources.eval_on_failure:q}"
        " > {log:q} 2>&1"
        + RECORD_DIGEST
