"""What `fp8rl COMMAND --help` tells a user, per command: what it does, what it reads and writes, an
example, and the exit codes particular to it (`add_command` shows it under the command's one-line
summary, with the exit codes every command shares after it). Written for someone running the
commands, so it names files, config keys and other commands, never the modules behind them; the
developer notes stay in each command module's docstring. `USAGE` has one entry per command path
(`"eval lm-eval"`; `""` is `fp8rl` itself), and a test holds every command to it.
"""

from __future__ import annotations

from fp8rl.evaluate.suites import REGISTRY as EVAL_SUITES

USAGE: dict[str, str] = {
    "": """
Every Snakemake rule of the DAG calls one of these commands; each also runs on its own. A command that
needs a config takes it as `--config FILE` (a YAML file of config/) and any key of it as
`--set KEY=VALUE`. Start with:

    fp8rl study ratio-noise                              # seconds: the mechanism on synthetic ratios
    fp8rl config validate --config config/smoke.yaml     # every problem of a config, before any run
    fp8rl matrix --config config/smoke.yaml              # the runs a config's DAG trains
""",
    "config": """
Read an experiment config: check it, print it with every default, or print the schema of all keys.

    fp8rl config validate --config config/smoke.yaml
    fp8rl config show --config config/smoke.yaml --set schedule.steps=3
    fp8rl config schema
""",
    "config validate": """
Reads the config file (and the `--set` overrides) and checks every key and value, and what the tier
needs of them; writes nothing. Prints `ok` and the number of runs, or each problem with its key, its
line in the file (or the `--set` that caused it) and the allowed values, and exits 2.

    fp8rl config validate --config config/smoke.yaml --set matrix.seeds=[0,1]
""",
    "config show": """
Reads the config file (and the `--set` overrides) and prints it as YAML with every default filled in:
the settings a run of this config uses. Writes nothing.

    fp8rl config show --config config/smoke.yaml
""",
    "config schema": """
Prints the JSON schema of the experiment config: every section and key, its type, default and
description. Reads and writes nothing.

    fp8rl config schema > schema.json
""",
    "matrix": """
Reads the config and lists the run ids its DAG trains (`algo/model/variant/granularity/[condition/]seedN`),
with a count per axis; `--algo`, `--variant` and the other axis options keep only matching runs.
Writes nothing.

    fp8rl matrix --config config/smoke.yaml --variant fp8_calib
    fp8rl matrix --config config/paper.yaml --json
""",
    "report": """
Reads every run of the tier (`{results_dir}/{tier}/runs/`, or `--runs-dir`), their eval files and the
base models, and writes the tier's report under `{results_dir}/{tier}/`: `tables/` (CSV and Markdown),
`plots/` (PNG and SVG), `report.html`, `SUMMARY.md` (the tier on one page) and `report.json` (run
counts, data problems, and a hash of every file), swapped in whole. It prints the run counts, the data
problems and where the files are. Another report or publish on the same tier at the same time exits 2.

    fp8rl report --config config/smoke.yaml          # -> results/smoke/
""",
    "publish": """
Reads a tier's finished report (`{results_dir}/{tier}/`), checks each file against its `report.json`,
and copies it with `provenance.json` into `{results_dir}/published/{tier}/` (or `--out`), swapped in
whole. A report that is missing, incomplete, edited since it was built, being written, or (with
`--config`) built from another config exits 2 naming the problem.

    fp8rl publish --config config/smoke.yaml                                  # -> results/published/smoke/
    fp8rl publish --config config/ci.yaml --out results/published/ci
""",
    "archive": """
A study longer than one machine's session (the longform failure search: about 24 CPU-hours) goes on
over several machines: `save` copies each finished run (every file but its checkpoints) and the base it
started from into `{results_dir}/published/archive/{tier}/`, to commit; on the next machine the data is
rebuilt and `restore` puts the bases and runs back, so the DAG trains only what is left. The bases
travel because CPUs of another vendor train other bases from the same config. `status` says where the
runs stand without reading any result.

    fp8rl archive status --config config/longform.yaml
    fp8rl archive save --config config/longform.yaml
    snakemake --profile profiles/local --configfile config/longform.yaml --until data
    fp8rl archive restore --config config/longform.yaml
    snakemake --profile profiles/local --configfile config/longform.yaml
""",
    "archive save": """
Reads every finished run of the tier (a run directory with `summary.json`), the base it started from
and the data, and adds them to `{results_dir}/published/archive/{tier}/` (`manifest.json`: each file's
sha256, each run's status and base, the fingerprints of each base and of the data), swapped in whole;
archived runs this results folder does not hold are kept. A finished run without the result of every
eval suite the config turns on is left out and named (restored without its checkpoint, it could not
be evaluated); its archived copy, if any, stays. Exits 2 when the tier has no finished run, a
run's base or the data is gone, an archived file is not the one the manifest records, or a base or the
data here is not the one the archived runs used.

    fp8rl archive save --config config/longform.yaml
""",
    "archive restore": """
Needs the tier's data built (`snakemake ... --until data`) and the same data the archive recorded.
Puts each archived base back where `{results_dir}/{tier}/base/` has none, then each archived run into
`{results_dir}/{tier}/runs/` where its directory does not exist and its base is the archived one, with
the Snakemake digest records (a run whose config sections changed since is still rerun by the DAG).
Restored runs have no checkpoint: they are reported, not evaluated again. Prints what was restored and
why a run was not; exits 1 when a run stayed out because a base built here is another, 2 when the
archive is missing, an archived file is not the one recorded, or the data is missing or other.

With `--bases-from TIER` it reads TIER's archive instead and puts back only the bases this config's
matrix starts from (none of TIER's runs: a run's train digest names its tier), each only where this
config's SFT digest (the model's entry, numerics, task, sft) is the one the archive recorded; a base
that differs is named and left to the DAG (exit 1). A study that continues another's, such as the
corrections' comparison on the failure search's bases, so starts from the very same bases.

    fp8rl archive restore --config config/longform.yaml
    fp8rl archive restore --config config/corrections.yaml --bases-from longform
""",
    "archive status": """
Where a tier's runs and bases stand, read from which files exist and never from a result: per arm of
the study (or cell of the matrix), how many runs are archived, evaluated, trained, in training or not
started; each run in training with the steps it has logged; each base archived, built or not built; and
whether evaluated runs wait for `fp8rl archive save`. No metric, run status (a divergence) or score is
read or printed, so a pre-registered study can be followed while it runs. `--json` gives every run.

    fp8rl archive status --config config/corrections.yaml
""",
    "eval": """
Score one checkpoint and write one result file per suite (the schema of docs/interfaces.md); each
suite is a subcommand, and `run` runs several in one process (what the DAG does on one machine):

    fp8rl eval lm-eval --config FILE --checkpoint DIR --data DIR --out eval/lm_eval.json
    fp8rl eval agent   --config FILE --checkpoint DIR --data DIR --out eval/agent.json
    fp8rl eval heldout --config FILE --checkpoint DIR --data DIR --out eval/heldout.json
    fp8rl eval heldout-history --config FILE --checkpoint DIR --data DIR --out eval/heldout_history.json
    fp8rl eval run lm_eval agent --config FILE --checkpoint DIR --data DIR --out-dir eval/
""",
    "eval run": """
Runs the suites named (`lm_eval`, `agent`, `heldout`, `heldout_history`: the result files' names) on
one checkpoint in one process, in the order given, and writes `<out-dir>/<suite>.json` for each: the config is read and the
libraries imported once, where `fp8rl eval <suite>` once per suite would pay that per suite. Inputs,
exit codes and `--on-failure` (for the suites that take it) as each suite's own subcommand.

    fp8rl eval run lm_eval agent --config config/smoke.yaml --data results/smoke/data \\
        --checkpoint results/smoke/runs/grpo/tiny/bf16/none/seed0/checkpoint --out-dir /tmp/eval
""",
    "data": """
Writes the tier's task splits into `--out`: `train.jsonl`, `test.jsonl` and, for the agent benchmark,
`tool_train.jsonl` and `tool_test.jsonl`, one example per line, plus `data.json` saying how they were
made. The arithmetic tasks are generated from `task.seed` (offline, any machine); a hub dataset is
converted from the snapshot `fp8rl fetch data` recorded (`--hub`). A second `fp8rl data` on the same
`--out` at the same time exits 2, and so does a task the config's backend cannot build.

    fp8rl data --config config/smoke.yaml --out results/smoke/data
""",
    "fetch": """
The only commands that download: run them where there is internet (a login node). They fill the
config's hub cache (`hub.home`) and write a record of what they fetched (repository, commit, file
hashes); every other command then reads that cache offline.

    fp8rl fetch data  --config config/paper.yaml --out results/paper/data/hub.json
    fp8rl fetch model --config config/paper.yaml --model qwen3-8b --out results/paper/base/qwen3-8b/model.json
""",
    "fetch data": """
Downloads the training set and lm-eval's eval sets the config names into `hub.home` at their pinned
revisions, and writes `--out`, the record of each file fetched (repository, commit, path, sha256, size).

    fp8rl fetch data --config config/paper.yaml --out results/paper/data/hub.json
""",
    "fetch model": """
Downloads the model `--model` (a `models[].name` of the config whose source is a hub id) at its pinned
revision into `hub.home`, and writes `--out`, the record of its files.

    fp8rl fetch model --config config/paper.yaml --model qwen3-8b --out results/paper/base/qwen3-8b/model.json
""",
    "sft": """
Trains the base model every RL run of a scratch model starts from: a small model initialised at random,
trained with supervised next-token loss on `--data`'s `train.jsonl` (and the tool-call examples) for
`sft.steps` steps, or until `sft.stop_at_accuracy`. Writes `--out`: the model in Hugging Face format
and `sft.json` (loss, test accuracies, seconds, provenance). `--seed` builds the base of that RL seed
(`sft.per_seed`). With `--no-progress` (as under the DAG) it prints a line of step, loss, elapsed time
and ETA every few seconds instead of a progress bar.

    fp8rl sft --config config/smoke.yaml --model tiny --data results/smoke/data --out /tmp/base/tiny
""",
    "model": """
Writes the base directory of a pretrained model (`--model`, source `hf` or `package`): loads it from
the hub cache or its weights package and saves it to `--out` in Hugging Face format with `base.json`.

    fp8rl model --config config/small.yaml --model smollm2-135m --out results/small/base/smollm2-135m
""",
    "train": """
Trains one run of the matrix (`--run`, a run id of `fp8rl matrix`) with the reference trainer: GRPO or
DAPO from the base in `--base` on `--data`'s `train.jsonl`, in the run's precision (bf16, or FP8 with
its correction). Writes the run directory `--out`: `config.yaml`, `metrics.jsonl` (one line per step),
TensorBoard events in `tb/`, `checkpoint/` (resumable), `throughput.json` and, last, `summary.json`
(`ok`, `diverged` with its reason, or `failed`). Run again on the same `--out` it resumes from the
checkpoint. `--reference` is the finished bf16 run a `calib.reference: run` cell calibrates against.
Bad arguments (a run id outside the matrix, a base of another model, a malformed data row) exit 2
before any work; so does a second trainer on the same `--out`. It exits 0 for a finished or diverged
run. On SIGTERM (a Slurm time limit) it saves a checkpoint after the current step and exits 143; the
next `fp8rl train` resumes there.

    fp8rl train --config config/smoke.yaml --run grpo/tiny/fp8_calib/tensorwise/seed0 \\
        --base results/smoke/base/tiny --data results/smoke/data --out /tmp/run
""",
    "study": """
Small experiments that need no DAG.

    fp8rl study ratio-noise      # seconds: FP8-like noise on PPO ratios vs the clip fraction
""",
    "study ratio-noise": """
The paper's mechanism on synthetic PPO ratios, in seconds: adds FP8-like noise of each `--levels`
standard deviation to the log-ratios of a synthetic batch and prints, per level, the share of
negative-advantage tokens clipped below the lower bound with the fixed bounds and with calibrated
bounds, beside the BF16 reference, and FP8's excess over BF16 on the same tokens. The clip settings
come from `--config` (with `--algo`, `--set`), or from the config defaults without one. Reads no
files; `--out` also writes the rows as JSON.

    fp8rl study ratio-noise
    fp8rl study ratio-noise --config config/smoke.yaml --algo dapo --levels 0,0.1,0.2 --json
""",
    "containers": """
The pinned container images the cluster runs each rule in (`containers:` in the config): build them,
make Apptainer `.sif` files, and check that every base image and requirement is pinned.

    fp8rl containers check
    fp8rl containers build train --config config/paper.yaml --out results/paper/containers/train.json --dry-run
""",
    "containers build": """
Builds the image `name` (train, eval, bfcl or cpu) from `containers/NAME` with docker buildx or
podman, and writes `--out`, a record of the image and its id. `--dry-run` prints the engine commands
instead of running them.

    fp8rl containers build train --config config/paper.yaml --out results/paper/containers/train.json
""",
    "containers sif": """
Converts the built image `name` (train, eval, bfcl or cpu; with `containers.mode: prebuilt`, the
published one) into an Apptainer `.sif` file at `--out`. `--dry-run` prints the commands instead.

    fp8rl containers sif train --config config/paper.yaml --out results/paper/containers/train.sif
""",
    "containers check": """
Reads `containers/` (under `--root`) and lists every base image without a digest and every
requirement without an exact, hash-locked pin. Writes nothing. Exits 1 if it found any.

    fp8rl containers check
""",
    "verl": """
The paper tier's training through verl (Ray, Megatron, vLLM) on a GPU cluster. `verl train` is what
the DAG's train rule runs there; the others check or inspect a run without GPUs.

    fp8rl verl overrides --config config/paper.yaml --run grpo/qwen3-8b/fp8_calib/blockwise/seed0
    fp8rl verl rehearse --config config/paper.yaml
""",
    "verl train": """
Takes the arguments of `fp8rl train` and writes the same run directory: checks that verl can run the
cell, writes verl's inputs and its job script, runs it (Ray across the Slurm allocation, verl, the
checkpoint in Hugging Face format), then imports verl's log as `metrics.jsonl` and writes
`summary.json` and `throughput.json`. `--override KEY=VALUE` adds a Hydra override for verl;
`--dry-run` stops before running. It exits 1 when the run failed, so the DAG resubmits it, except on
its last attempt (`--on-failure record`) or when it failed as the attempt before did: then
`summary.json` says `failed` and it exits 0. A second one on the same `--out` exits 2.

    fp8rl verl train --config config/paper.yaml --run grpo/qwen3-8b/fp8_calib/blockwise/seed0 \\
        --base results/paper/base/qwen3-8b --data results/paper/data --out results/paper/runs/... --dry-run
""",
    "verl rehearse": """
Rehearses every job type of the config's DAG on a CPU machine (a login node) before a GPU allocation:
each job runs its real command, in the packages it runs in on the cluster, as far as a CPU allows. The
training jobs run their job scripts to verl's first GPU request (one job per algorithm, variant,
granularity and model, or the `--run` ids), then on CPU what follows a step's GPU work (verl's actor
update over two processes, its metrics through verl's file logger and the import, the export's
tokenizer, a job killed and resumed); the fetch jobs and the splits run on this machine against a
stand-in hub; the data, export, eval and report jobs run in their image's pinned packages
(build/venv-IMAGE). `--jobs` picks job types (below); `--run` alone, only those training jobs.
Without `--base`/`--data` the jobs take stand-ins. Each job type prints ok, skipped (why, and the
command that builds what is missing, e.g. `make image-venvs IMAGE_VENVS=eval` for the eval image's
packages, `scripts/verl_test_env.sh` for verl) or failed with what it found. Works in `--out` (a new temporary folder by default). Exits 1 when
a job type failed (a training job stopped before its first GPU request, a step after it failed, an
image's job failed), 0 when every job type was ok or skipped.

    PYTHONPATH=build/verl-site fp8rl verl rehearse --config config/paper.yaml
    fp8rl verl rehearse --config config/paper.yaml --jobs data,eval-lm,eval-agent
""",
    "verl overrides": """
Prints the Hydra overrides `fp8rl verl train` would give verl for the run `--run` (one per line; with
`--json` also the loss and where the run deviates from the paper's setup). Writes nothing; `--out` is
the run directory the printed paths point into.

    fp8rl verl overrides --config config/paper.yaml --run grpo/qwen3-8b/fp8_calib/blockwise/seed0
""",
    "verl import-metrics": """
Reads verl's file-logger JSONL (`log`, the file `VERL_FILE_LOGGER_PATH` named) and writes `--out`, a
`metrics.jsonl` under fp8rl's metric names, one line per step, as `fp8rl train` writes it;
`fp8rl verl train` does this itself after a run.

    fp8rl verl import-metrics verl_metrics.jsonl --out metrics.jsonl
""",
    "check": """
Compares a fresh tier's report (`RESULTS`, e.g. `results/ci/smoke`) with a published one
(`--against`): for each variant and metric the published comparison table gives with a 95 % interval,
the fresh mean must lie in that interval (widened about its mean by `--widen`, plus `--atol` for
rounding); a published cell missing from the fresh table fails too. Prints every band. Exits 1
naming each metric and variant outside its band, 0 when all are inside, 2 when either report's files
are not the ones its `report.json` records or the publication has no band at all (one seed).

    fp8rl check results/ci/smoke --against results/published/ci
""",
    "decide": """
Read one of the rules a study tier registers in its config before its runs, and print its figures as
JSON: whether the testbed is accepted (`acceptance`), or at which mismatch setting the failure search
decides the comparison runs (`failure-search`). Exit 0 when the rule is met or decided, 1 when it is not
(yet), 2 when the config has no such section.

    fp8rl decide acceptance --config config/longform.yaml
    fp8rl decide failure-search --config config/longform.yaml
""",
    "decide acceptance": """
Reads the config's `acceptance` section and the run folders of its acceptance arm (the bf16 runs): each
run's entropy and response length at step 1, whether a detector flagged it, and the held-out endpoint of
its base and of its final checkpoint. Prints every figure and the criteria missed as JSON; `fp8rl report`
writes the same as `tables/acceptance.{csv,md}`. Exits 1 when a criterion is missed (a control that has
not run yet misses them all), 2 when the config has no `acceptance` section or its arm is no cell of
the matrix.

    fp8rl decide acceptance --config config/longform.yaml
""",
    "decide failure-search": """
Reads the config's `failure_search` section and the tier's built report (`tables/study_survival.csv`,
`tables/planned.csv`; `--tables DIR` for another folder). Per condition, in order of its target KL, the
decisive arm's divergences and its planned held-out contrast, whether it fails by the registered rule,
and the decision: the lowest-KL setting that fails, or that none does. Prints it as JSON; `fp8rl report`
writes the same as `tables/failure_search.md`. Exits 0 once decided, 1 while a setting below the
decision is incomplete (nothing is decided then), 2 when the config has no `failure_search` section or
the report is not built.

    fp8rl report --config config/longform.yaml
    fp8rl decide failure-search --config config/longform.yaml
""",
    "quotes": """
README.md and docs/ quote result figures in generated blocks (`<!-- fp8rl:results NAME -->`). `--check`
regenerates each block from the published tables under `results/published/` and exits 1 naming every
block that differs; `--write` rewrites the blocks. Each publication is first checked against its
`report.json` (an edited one exits 2 naming the file).

    fp8rl quotes --check
""",
}
# Each evaluation suite's `fp8rl eval <command>` text is its module's `usage` (fp8rl.evaluate.suites).
USAGE.update({f"eval {suite.command}": suite.usage for suite in EVAL_SUITES.values()})
