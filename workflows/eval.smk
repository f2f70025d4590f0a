# lm-eval, the agent benchmark and the held-out bf16 endpoint on every run's final checkpoint (docs/interfaces.md result schema);
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


# The held-out endpoint (eval.heldout; fp8rl.engine.heldout): the run's final checkpoint sampled with the
# bf16 sampler on held-out prompts. It reads the checkpoint only, so adding it never retrains a run.
EVAL_HELDOUT_TRIGGER = ConfigTrigger(
    "eval_heldout",
    RUN_DIR.eval_file("heldout"),
    section_digest("numerics", "eval", "task", "schedule"),
)


rule eval_heldout:
    input:
        changed=EVAL_HELDOUT_TRIGGER.changed,
        summary=str(RUN_DIR.summary),
        train=rules.data.output.train,
        images=container_inputs("train"),
    output:
        str(RUN_DIR.eval_file("heldout")),
    params:
        config=CONFIG_FILE,
        checkpoint=lambda wildcards, input: RunDir(Path(input.summary).parent).checkpoint,
        data=lambda wildcards, input: Path(input.train).parent,
        **EVAL_HELDOUT_TRIGGER.params(),
    log:
        f"{R}/logs/eval_heldout/{RUN}.log",
    benchmark:
        f"{R}/benchmarks/eval_heldout/{RUN}.tsv"
    threads: threads_for("eval_heldout")
    resources:
        **resources_for("eval_heldout"),
    conda:
        CONDA_ENV
    shell:
        in_image("train") + "fp8rl eval heldout --config {params.config:q} --checkpoint {params.checkpoint:q}"
        " --data {params.data:q} --out {output:q} > {log:q} 2>&1"
        + RECORD_DIGEST


# ... and of each base the runs start from, so every run's gain over its own base is in endpoints.csv.
EVAL_HELDOUT_BASE_TRIGGER = ConfigTrigger(
    "eval_heldout_base",
    f"{R}/base/{{base}}/eval/heldout.json",
    section_digest("numerics", "eval", "task", "schedule"),
)


rule eval_heldout_base:
    input:
        changed=EVAL_HELDOUT_BASE_TRIGGER.changed,
        base=lambda wildcards: base_record(*base_model_seed(wildcards.base)),
        train=rules.data.output.train,
        images=container_inputs("train"),
    output:
        f"{R}/base/{{base}}/eval/heldout.json",
    wildcard_constraints:
        base=r"[^/]+(/seed\d+)?",
    params:
        config=CONFIG_FILE,
        checkpoint=lambda wildcards, input: Path(input.base).parent,
        data=lambda wildcards, input: Path(input.train).parent,
        **EVAL_HELDOUT_BASE_TRIGGER.params(),
    log:
        f"{R}/logs/eval_heldout/base/{{base}}.log",
    benchmark:
        f"{R}/benchmarks/eval_heldout/base/{{base}}.tsv"
    threads: threads_for("eval_heldout")
    resources:
        **resources_for("eval_heldout"),
    conda:
        CONDA_ENV
    shell:
        in_image("train") + "fp8rl eval heldout --config {params.config:q} --checkpoint {params.checkpoint:q}"
        " --data {params.data:q} --out {output:q} > {log:q} 2>&1"
        + RECORD_DIGEST
