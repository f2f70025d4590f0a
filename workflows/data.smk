# Task data and the tier's base models.
#
# Hub downloads happen in local rules only (`fetch_data`, `fetch_model`: on the login node, the one
# place with internet access), into the shared cache `hub.home`; every cluster job reads that cache
# offline. The arithmetic task needs no download: `data` generates it.


localrules:
    fetch_data,
    fetch_model,


from fp8rl.engine.data import DATA_TASKS

HUB_RECORD = f"{R}/data/hub.json"


FETCH_DATA_TRIGGER = ConfigTrigger("fetch_data", HUB_RECORD, section_digest("task", "eval", "hub"))


rule fetch_data:
    """The training set and lm-eval's eval sets into hub.home, recorded with commits and file hashes."""
    input:
        changed=FETCH_DATA_TRIGGER.changed,
    output:
        HUB_RECORD,
    params:
        config=CONFIG_FILE,
        **FETCH_DATA_TRIGGER.params(),
    log:
        f"{R}/logs/fetch_data/fetch_data.log",
    conda:
        CONDA_ENV
    shell:
        "fp8rl fetch data --config {params.config:q} --out {output:q} > {log:q} 2>&1"
        + RECORD_DIGEST


DATA_TRIGGER = ConfigTrigger("data", f"{R}/data/train.jsonl", section_digest("task"))


rule data:
    input:
        changed=DATA_TRIGGER.changed,
        # the reference trainer's own tasks are generated (or, gsm8k, read by `datasets`); hub training
        # sets for verl come from the fetch_data record
        hub=[HUB_RECORD] if CFG.task.name not in DATA_TASKS else [],
        images=container_inputs("data"),
    output:
        train=f"{R}/data/train.jsonl",
        test=f"{R}/data/test.jsonl",
        tool=f"{R}/data/tool_test.jsonl",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: Path(output.train).parent,
        hub=lambda wildcards, input: ["--hub", input.hub[0]] if input.hub else [],
        **DATA_TRIGGER.params(),
    log:
        f"{R}/logs/data/data.log",
    benchmark:
        f"{R}/benchmarks/data/data.tsv"
    threads: threads_for("data")
    resources:
        **resources_for("data"),
    conda:
        CONDA_ENV
    shell:
        in_image("data") + "fp8rl data --config {params.config:q} --out {params.out:q} {params.hub:q}"
        " > {log:q} 2>&1"
        + RECORD_DIGEST


FETCH_MODEL_TRIGGER = ConfigTrigger(
    "fetch_model",
    f"{R}/base/{{model}}/model.json",
    lambda wildcards: section_digest("hub", model=wildcards.model),
)


rule fetch_model:
    """A `source: hf` model at its pinned revision into hub.home; the record stands for its base model."""
    input:
        changed=FETCH_MODEL_TRIGGER.changed,
    output:
        f"{R}/base/{{model}}/model.json",
    params:
        config=CONFIG_FILE,
        **FETCH_MODEL_TRIGGER.params(),
    log:
        f"{R}/logs/fetch_model/{{model}}.log",
    conda:
        CONDA_ENV
    shell:
        "fp8rl fetch model --config {params.config:q} --model {wildcards.model:q} --out {output:q}"
        " > {log:q} 2>&1"
        + RECORD_DIGEST


SFT_TRIGGER = ConfigTrigger(
    "sft",
    f"{R}/{SFT_BASE}/sft.json",
    lambda wildcards: CFG.base_digest(wildcards.model),
)


rule sft:
    input:
        changed=SFT_TRIGGER.changed,
        train=rules.data.output.train,
        images=container_inputs("train"),
    output:
        f"{R}/{SFT_BASE}/sft.json",
    params:
        config=CONFIG_FILE,
        data=lambda wildcards, input: Path(input.train).parent,
        out=lambda wildcards, output: Path(output[0]).parent,
        seed=lambda wildcards: ["--seed", wildcards.seed] if CFG.sft.per_seed else [],
        **SFT_TRIGGER.params(),
    log:
        f"{R}/logs/{SFT_JOB}.log",
    benchmark:
        f"{R}/benchmarks/{SFT_JOB}.tsv"
    threads: threads_for("sft")
    resources:
        **resources_for("sft"),
    conda:
        CONDA_ENV
    shell:
        in_image("train") + "fp8rl sft --config {params.config:q} --model {wildcards.model:q}"
        " --data {params.data:q} --out {params.out:q} {params.seed:q} --no-progress > {log:q} 2>&1"
        + RECORD_DIGEST


# A pretrained model (source hf or package): loaded once and re-saved as the tier's base directory.
BASE_MODEL_TRIGGER = ConfigTrigger(
    "base_model",
    f"{R}/base/{{model}}/base.json",
    lambda wildcards: section_digest(model=wildcards.model),
)


rule base_model:
    input:
        changed=BASE_MODEL_TRIGGER.changed,
        images=container_inputs("train"),
    output:
        f"{R}/base/{{model}}/base.json",
    params:
        config=CONFIG_FILE,
        out=lambda wildcards, output: Path(output[0]).parent,
        **BASE_MODEL_TRIGGER.params(),
    log:
        f"{R}/logs/base/{{model}}.log",
    benchmark:
        f"{R}/benchmarks/base/{{model}}.tsv"
    threads: threads_for("sft")
    resources:
        **resources_for("sft"),
    conda:
        CONDA_ENV
    shell:
        in_image("train") + "fp8rl model --config {params.config:q} --model {wildcards.model:q} --out {params.out:q}"
        " > {log:q} 2>&1"
        + RECORD_DIGEST
