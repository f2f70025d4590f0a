# Shared by the workflow files: the validated config, the tier's paths, per-rule resources, and the
# helpers that map wildcards to run ids. The Snakefile includes it first (after its configfile).

import contextlib
import os
import sys
import time
from pathlib import Path

from snakemake.utils import update_config

from fp8rl import numerics
from fp8rl.config import TRAIN_SECTIONS, RunSpec, expand_matrix, resolve_run
from fp8rl.vocabulary import ALGORITHMS, GRANULARITIES, NO_CONDITION, NO_GRANULARITY, VARIANTS
from fp8rl.config_loader import (
    ConfigError,
    key_lines,
    parse_yaml,
    snakemake_overrides,
    validate_config,
)
from fp8rl.validation import CONFIG_CHECKS
from fp8rl.io import atomic_write_text
from fp8rl.locks import RunDirLocked, hold_lock
from fp8rl.run_files import RunDir, runs_dir

# ------------------------------------------------------------------------------------------ config

# The config files, merged as Snakemake merges them, then Snakemake's `--config` entries on top as
# `fp8rl --set` applies its overrides: `--config set=eval.limit=20` takes fp8rl's dotted keys (Snakemake
# itself refuses `--config eval.limit=20`), `--config results_dir=out` a top-level key; a problem with
# one names it (`--config eval.limit=0: ...`).
try:
    _lines, _data = {}, {}
    for _file in workflow.configfiles:  # duplicate keys, alias bombs, non-UTF-8 text; key lines
        _node, _values = parse_yaml(Path(_file))
        _lines.update(key_lines(_node) if _node is not None else {})
        update_config(_data, _values or {})
    CFG = validate_config(
        _data,
        source=" + ".join(str(f) for f in workflow.configfiles) or "config",
        lines=_lines,
        overrides=snakemake_overrides(workflow.config_settings.config),
        override_flag="--config",
        checks=CONFIG_CHECKS,  # the same checks as `fp8rl config validate`
    )
except ConfigError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)

# Every rule's `fp8rl` process starts in the config's numerics mode (fp8rl.numerics: the pinned kernel
# path unless `numerics: fast`), so none has to restart itself.
numerics.export(CFG.numerics)

# Rules call the `fp8rl` that belongs to the Python running Snakemake (e.g. .venv/bin/fp8rl) even when
# that environment is not activated.
os.environ.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

R = f"{CFG.results_dir}/{CFG.tier}"
# The software of host-run rules for `--software-deployment-method conda` (relative to workflows/).
CONDA_ENV = "envs/fp8rl.yaml"
RUNS = expand_matrix(CFG)
# A matrix with FP8 conditions (study tiers) has the condition in its run ids (fp8rl.config.runs).
RUN = (
    "{algo}/{model}/{variant}/{granularity}/{condition}/seed{seed}"
    if CFG.matrix.conditions
    else "{algo}/{model}/{variant}/{granularity}/seed{seed}"
)
# The run directory of the wildcards' run (fp8rl.run_files names its files).
RUN_DIR = RunDir.of(runs_dir(CFG.results_dir, CFG.tier), RUN)


# The validated config with every default filled in, as one YAML file that each `fp8rl` command reads.
# Content-addressed (`{R}/config/{digest}.yaml`): written once, never changed under a job. A Path on
# purpose: Snakemake's params trigger records only plain values (str, int, ...), so the file's name, a
# digest of the whole config, does not rerun every rule on any change; each rule's `digest` param names
# the config sections it depends on instead.
CONFIG_FILE = Path(R) / "config" / f"{CFG.digest()}.yaml"


# One DAG per tier's results at a time: Snakemake's own lock lives in the working directory, so a second
# DAG started from elsewhere on the same results_dir would run the same jobs over this one's outputs and
# logs. `{R}/dag.lock` (fcntl.flock, fp8rl.locks.hold_lock) is held from the first job to the end; the
# second DAG exits 2 naming the first before any job. Jobs Snakemake spawns run without hooks.
DAG_LOCK = contextlib.ExitStack()
# Before any job: a report.json at least this recent was written by this DAG (printed at its end).
DAG_START = time.time()


onstart:
    # Written when jobs are about to run, never while planning: `snakemake -n` writes nothing.
    import yaml

    try:
        DAG_LOCK.enter_context(hold_lock(Path(R) / "dag.lock", "wait for that DAG to end, or stop it"))
    except RunDirLocked as exc:
        print(f"error: another DAG runs on {R}: {exc}", file=sys.stderr)
        sys.exit(2)
    if not CONFIG_FILE.is_file():
        atomic_write_text(CONFIG_FILE, yaml.safe_dump(CFG.model_dump(mode="json"), sort_keys=False))
    # A run prints each job as its `message:`: for a rule with a shell command, the rule's name and that
    # command without the digest bookkeeping it ends with (RECORD_DIGEST). With the profiles (no shell
    # lines, no reasons) that is one line per job; a dry run keeps Snakemake's full job blocks.
    for _each in workflow.rules:
        if _each.shellcmd and not _each.message:
            _each.message = f"{{rule}}: {_each.shellcmd.removesuffix(RECORD_DIGEST)}"
        elif _each.name == "all":
            _each.message = f"all: the {CFG.tier} tier's report under {R}/"


onsuccess:
    # The end of any tier's DAG: its comparison table and where the tables, plots and report are.
    DAG_LOCK.close()
    from fp8rl.commands.report import dag_end_text

    print(dag_end_text(CFG, DAG_START), flush=True)


onerror:
    DAG_LOCK.close()


wildcard_constraints:
    algo="|".join(ALGORITHMS),
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    variant="|".join(VARIANTS),
    granularity="|".join((NO_GRANULARITY, *GRANULARITIES)),
    condition="|".join((NO_CONDITION, *(c.name for c in CFG.matrix.conditions))) or NO_CONDITION,
    seed=r"\d+",


# --------------------------------------------------------------------------------------- resources

# Config `resources` key of a rule: the evaluation rules (`eval`, `eval_lm`, `eval_heldout_base`, ...)
# share `eval`; a missing key falls back to `default` (ExperimentConfig.resources_for).
def resource_key(rule):
    return "eval" if rule.split("_")[0] == "eval" else rule


def threads_for(rule):
    return CFG.resources_for(resource_key(rule)).threads


def resources_for(rule):
    """Snakemake resources of a rule: memory (MB), runtime (minutes), GPUs (`gpu`, the name the
    Slurm executor maps to --gpus) and the Slurm partition and account when the config names them."""
    r = CFG.resources_for(resource_key(rule))
    out = {"mem_mb": r.mem_mb, "runtime": r.runtime}
    if r.gpus:
        out["gpu"] = r.gpus
    if r.partition:
        out["slurm_partition"] = r.partition
    if r.account:
        out["slurm_account"] = r.account
    return out


def retries_for(rule):
    """How often a failed or timed-out job of the rule is resubmitted (config `resources.*.retries`)."""
    return CFG.resources_for(resource_key(rule)).retries


def rule_retries(rule):
    """The rule's `retries:` directive: `retries_for` in the Snakemake process that schedules the DAG, 0 in
    the one a cluster job starts to run its rule. That process reads the directive too, which overrides
    the `--retries 0` Snakemake gives it, and would retry the command inside the job: every resubmission
    of a job that fails for good (exit 2) would run it `retries` + 1 times, (retries + 1)^2 in all."""
    return retries_for(rule) if workflow.is_main_process else 0


def eval_on_failure(rule):
    """The eval commands' `--on-failure` as a resource of the attempt: `raise` (exit non-zero, so
    Snakemake resubmits) until the last attempt, `record` on it (the tasks that finished are written,
    the crashed ones listed, and the report still runs)."""
    retries = retries_for(rule)
    return lambda wildcards, attempt: "record" if attempt > retries else "raise"


def train_resources():
    """Resources of the train rule. The reference trainer: those of `resources.train`. verl: whole
    nodes per the model's `nodes` x `gpus_per_node`, the GPUs as a per-node `gres` with one task per
    node (the executor's `gpu` would be a job total), memory and runtime from `resources.train`."""
    out = resources_for("train")
    if CFG.backend != "verl":
        return out
    from fp8rl.adapters.verl_launch import slurm_resources

    out.pop("gpu", None)
    for key in ("nodes", "gres", "tasks_per_node"):
        out[key] = lambda wildcards, key=key: slurm_resources(
            CFG.model(wildcards.model).nodes, CFG.model(wildcards.model).gpus_per_node
        )[key]
    return out


# The command that trains one run: fp8rl's reference trainer, or verl on the cluster (same arguments).
TRAIN_COMMAND = "fp8rl verl train" if CFG.backend == "verl" else "fp8rl train"


# ----------------------------------------------------------------------------------- rerun triggers


def section_digest(*sections, model=None, condition=None, variant=None):
    """A short hash of the config sections a rule's output depends on. Passed as a param, so changing
    one of them reruns that rule (Snakemake's params trigger) and changing anything else does not."""
    return CFG.section_digest(*sections, model=model, condition=condition, variant=variant)


# Snakemake keeps the params it ran a job with in `.snakemake/` of the working directory: a fresh clone,
# or a DAG started from another directory, has none and would take every existing output as current.
# So the outputs carry their own record: once its command succeeded, a job writes its `digest` to
# `{R}/digests/{rule}/{its output}.digest` (`RECORD_DIGEST`). While the DAG is built, a job whose output
# exists with another digest recorded is forced (its output joins the DAG's forced files, as
# `--forcerun FILE` would add it): it reruns, and so does what depends on it, from any working
# directory, and a dry run says so ("forced"). An output without a record (made before records were
# kept) is taken as current; within one working directory Snakemake's own params trigger sees a
# change as well.
DIGESTS = f"{R}/digests"


class ConfigTrigger:
    """A rule's rerun trigger on its config sections: `digest` (a string, or a function of the job's
    wildcards) for the output pattern `output` (its first, the one the record is kept for)."""

    def __init__(self, rule, output, digest):
        self.rule, self.output, self.digest = rule, str(output), digest

    def _out(self, wildcards):
        return Path(self.output.format(**dict(wildcards.items())))

    def _record(self, wildcards):
        return Path(DIGESTS) / self.rule / f"{os.path.relpath(self._out(wildcards), R)}.digest"

    def stale(self, wildcards):
        """Whether the job's output exists under another digest than the config's now."""
        out, record = self._out(wildcards), self._record(wildcards)
        if not out.exists() or not record.is_file():
            return False
        now = self.digest(wildcards) if callable(self.digest) else self.digest
        try:
            return record.read_text().strip() != now
        except (OSError, UnicodeDecodeError):
            return True  # an unreadable record: rerun, which rewrites it

    def changed(self, wildcards):
        """An input function with no input: it forces the job when `stale` (in the main Snakemake
        process, while the DAG is built; the DAG's needs are worked out after every input function)."""
        if workflow.is_main_process and workflow.dag is not None and self.stale(wildcards):
            workflow.dag.forcefiles.add(str(self._out(wildcards)))
        return []

    def params(self):
        """The rule's params: `digest` (Snakemake's own trigger) and where the job records it."""
        return {
            "digest": self.digest,
            "digest_record": lambda wildcards: str(self._record(wildcards)),
            "digest_dir": lambda wildcards: str(self._record(wildcards).parent),
        }


# Appended to a rule's shell command: the job's digest, recorded once its command succeeded.
RECORD_DIGEST = (
    " && mkdir -p {params.digest_dir:q} && printf '%s\\n' {params.digest:q} > {params.digest_record:q}"
)


# ------------------------------------------------------------------------------------------ runs


def run_spec(wildcards):
    return RunSpec(
        wildcards.algo,
        wildcards.model,
        wildcards.variant,
        wildcards.granularity,
        int(wildcards.seed),
        wildcards.get("condition"),
    )


def run_dir(spec):
    """The RunDir of one run of the matrix."""
    return RunDir.of(runs_dir(CFG.results_dir, CFG.tier), spec.run_id)


# A scratch model's base directory under {R}: one per model, or one per model and base seed (sft.per_seed:
# the RL seed's own, or the seed % sft.bases it starts from: CFG.sft.base_seed).
SFT_BASE = "base/{model}/seed{seed}" if CFG.sft.per_seed else "base/{model}"
SFT_JOB = "sft/{model}/seed{seed}" if CFG.sft.per_seed else "sft/{model}"  # its log and benchmark


def base_record(model, seed):
    """The file that stands for the base checkpoint a run of `model` with RL seed `seed` starts from:
    `sft.json` of a scratch model's SFT (the base of `CFG.sft.base_seed(seed)`), the
    `model.json` record of an `hf` model fetched into the hub cache for verl (workflows/data.smk), or
    `base.json` of a pretrained model loaded and re-saved for the reference trainer (`fp8rl model`)."""
    source = CFG.model(model).source
    if source == "scratch":
        return f"{R}/{SFT_BASE}/sft.json".format(model=model, seed=CFG.sft.base_seed(seed))
    if source == "hf" and CFG.backend == "verl":
        name = "model.json"
    else:
        name = "base.json"
    return f"{R}/base/{model}/{name}"


def train_inputs(wildcards):
    spec = run_spec(wildcards)
    inputs = {
        "train": f"{R}/data/train.jsonl",
        "base": base_record(spec.model, spec.seed),
    }
    reference = resolve_run(CFG, spec).reference  # `calib.reference: run` cells: the matching bf16 run
    if reference is not None:
        inputs["reference"] = str(run_dir(reference).summary)
    return inputs


def base_dir_of(model, seed):
    """The directory of the base a run of `model` with RL seed `seed` starts from (beside its record)."""
    return str(Path(base_record(model, seed)).parent)


def base_model_seed(base):
    """(model, an RL seed) whose base is `base` (`{model}` or `{model}/seed{b}`): the model and base seed b."""
    model, _, last = base.partition("/")
    return model, int(last.removeprefix("seed")) if last else 0


def heldout_base_targets():
    """The result of every suite that scores bases too (`per_base`: the held-out endpoint) on every base
    the matrix starts from, once per base."""
    from fp8rl.evaluate.suites import enabled_suites

    suites = [s.name for s in enabled_suites(CFG) if s.per_base]
    bases = {base_dir_of(s.model, s.seed) for s in RUNS}
    return sorted(f"{base}/eval/{name}.json" for base in bases for name in suites)


def eval_targets(spec):
    """The eval result files of one run that the config asks for (fp8rl.evaluate.suites)."""
    from fp8rl.evaluate.suites import enabled_suites

    return [str(run_dir(spec).eval_file(s.name)) for s in enabled_suites(CFG)]


def eval_command(job):
    """An evaluation job's shell command (workflows/eval.smk), in its image: `fp8rl eval <suite>` of its
    one suite, or `fp8rl eval run` of its several suites into the run's eval/ folder; `--on-failure`
    where a suite records a crashed harness."""
    suite = job.suites[0]
    if len(job.suites) == 1:
        command = f"fp8rl eval {suite.command} --out {{output.{suite.name}:q}}"
    else:
        command = f"fp8rl eval run {' '.join(s.name for s in job.suites)} --out-dir {{params.out_dir:q}}"
    on_failure = " --on-failure {resources.eval_on_failure:q}" if job.records_failures else ""
    return (
        in_image(job.role)
        + command
        + " --config {params.config:q} --checkpoint {params.checkpoint:q} --data {params.data:q}"
        + on_failure
        + " > {log:q} 2>&1"
        + RECORD_DIGEST
    )


def eval_base_command(suite):
    """The shell command that scores one base with `suite` (a `per_base` suite), in its image."""
    return (
        in_image(suite.role)
        + f"fp8rl eval {suite.command} --config {{params.config:q}} --checkpoint {{params.checkpoint:q}}"
        " --data {params.data:q} --out {output:q} > {log:q} 2>&1"
        + RECORD_DIGEST
    )


def registered(path):
    """A report rule output, flagged for `snakemake --report` when it is a table, a figure or the HTML
    report (captions in workflows/report/, relative to the rule's file)."""
    p = Path(path)
    if p.suffix == ".csv":
        kind, category = "table", "Tables"
    elif p.suffix == ".png":
        kind, category = "plot", "Plots"
    elif p.name == "report.html":
        return report(path, caption="report/html.rst", category="fp8rl report")
    else:  # markdown tables, SVG copies, report.json: in the tier's folder, not Snakemake's report
        return path
    return report(path, caption=f"report/{kind}_{p.stem}.rst", category=category, labels={kind: p.stem})
