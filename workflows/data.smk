# Task data and the tier's base models.


rule data:
    input:
        images=container_inputs("data"),
    output:
        train=f"{R}/data/train.jsonl",
        test=f"{R}/data/test.jsonl",
        tool=f"{R}/data/tool_test.jsonl",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: Path(output.train).parent,
        digest=section_digest("task"),
    log:
        f"{R}/logs/data/data.log",
    benchmark:
        f"{R}/benchmarks/data/data.tsv"
    threads: threads_for("data")
    resources:
        **resources_for("data"),
    container: container_for("data")
    conda:
        CONDA_ENV
    shell:
        "fp8rl data --config {params.config:q} --out {params.out:q} > {log:q} 2>&1"


rule sft:
    input:
        train=rules.data.output.train,
        images=container_inputs("train"),
    output:
        f"{R}/base/{{model}}/sft.json",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: Path(input.train).parent,
        out=lambda wildcards, output: Path(output[0]).parent,
        digest=lambda wildcards: section_digest("task", "sft", model=wildcards.model),
    log:
        f"{R}/logs/sft/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/sft/{{model}}.tsv"
    threads: threads_for("sft")
    resources:
        **resources_for("sft"),
    container: container_for("train")
    conda:
        CONDA_ENV
    shell:
        "fp8rl sft --config {params.config:q} --model {wildcards.model:q} --data {params.data:q}"
        " --out {params.out:q} --no-progress > {log:q} 2>&1"


# A pretrained model (source hf or package): loaded once and re-saved as the tier's base directory.
rule base_model:
    input:
        images=container_inputs("train"),
    output:
        f"{R}/base/{{model}}/base.json",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: Path(output[0]).parent,
        digest=lambda wildcards: section_digest(model=wildcards.model),
    log:
        f"{R}/logs/base/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/base/{{model}}.tsv"
    threads: threads_for("sft")
    resources:
        **resources_for("sft"),
    container: container_for("train")
    conda:
        CONDA_ENV
    shell:
        "fp8rl model --config {params.config:q} --model {wildcards.model:q} --out {params.out:q}"
        " > {log:q} 2>&1"
