"""fp8rl: the whole experiment of one tier as one DAG.

    snakemake --profile profiles/local                               # the smoke tier (config/smoke.yaml)
    snakemake --profile profiles/local --configfile config/ci.yaml   # the CI tier
    snakemake --profile profiles/slurm --configfile config/paper.yaml

data -> base model (SFT) -> train every run of the matrix -> lm-eval and agent benchmark per run ->
report. The config is validated through fp8rl.config at load (a bad one exits 2 with the same message
as `fp8rl config validate`); rules hold paths and resources only and call `fp8rl` subcommands
(docs/interfaces.md). Outputs live under `{results_dir}/{tier}/`, logs and benchmarks mirror them under
`logs/{rule}/` and `benchmarks/{rule}/`.
"""

from snakemake.utils import min_version

min_version("9.0")


# `--configfile X` replaces the default instead of being merged over it.
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/smoke.yaml"


include: "workflows/common.smk"
include: "workflows/containers.smk"
include: "workflows/data.smk"
include: "workflows/train.smk"
include: "workflows/eval.smk"
include: "workflows/report.smk"


rule all:
    default_target: True
    input:
        rules.report.output,
