# One training run per cell of the matrix. A `fp8_calib*` run with `calib.reference: run` takes the
# matching bf16 run as an input (train_inputs). Only summary.json is declared: the trainer writes it
# last, so a run killed mid-way is incomplete to Snakemake, and its checkpoint/ (not an output, so
# never deleted by Snakemake) lets `fp8rl train` resume it. With `backend: verl` the rule calls
# `fp8rl verl train` (same arguments) and asks Slurm for the model's whole nodes (train_resources); on
# the job's last attempt it records a failed run in summary.json and exits 0 (`--on-failure record`, as
# the eval rules do), so the report still runs and the run is not resubmitted again.


TRAIN_TRIGGER = ConfigTrigger(
    "train",
    RUN_DIR.summary,
    lambda wildcards: section_digest(
        *TRAIN_SECTIONS,
        model=wildcards.model,
        condition=wildcards.get("condition"),
        variant=wildcards.variant,
    ),
)


rule train:
    input:
        unpack(train_inputs),
        changed=TRAIN_TRIGGER.changed,
        images=container_inputs("train"),
    output:
        summary=str(RUN_DIR.summary),
    params:
        config=CONFIG_FILE,
        run=lambda wildcards: run_spec(wildcards).run_id,
        data=lambda wildcards, input: Path(input.train).parent,
        base=lambda wildcards, input: Path(input.base).parent,
        out=lambda wildcards, output: Path(output.summary).parent,
        reference=lambda wildcards, input: (
            ["--reference", str(Path(input.reference).parent)] if "reference" in input.keys() else []
        ),
        **TRAIN_TRIGGER.params(),
    log:
        f"{R}/logs/train/{RUN}.log",
    benchmark:
        f"{R}/benchmarks/train/{RUN}.tsv"
    threads: threads_for("train")
    resources:
        **train_resources(),
        **({"train_on_failure": eval_on_failure("train")} if CFG.backend == "verl" else {}),
    conda:
        CONDA_ENV
    retries: rule_retries("train")
    shell:
        in_image("train") + TRAIN_COMMAND + " --config {params.config:q} --run {params.run:q} --base {params.base:q}"
        " --data {params.data:q} --out {params.out:q} {params.reference:q} --no-progress"
        + (" --on-failure {resources.train_on_failure:q}" if CFG.backend == "verl" else "")
        + " > {log:q} 2>&1"
        + RECORD_DIGEST
