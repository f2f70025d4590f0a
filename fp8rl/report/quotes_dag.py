"""How long whole tiers take, as docs/performance.md quotes it (fp8rl.report.quotes): generated from the
records `benchmarks/dag_time.py --json` writes from a tier's Snakemake job records, published as
`results/published/benchmarks/smoke_dag.json` (the smoke DAG from a clean clone) and `stress_dag.json`
(the stress tier), and what a job's process pays in imports before its work starts
(`benchmarks/process_startup.py --json`: `process_startup.json`). Each DAG record holds, per rule, the jobs, their wall and CPU seconds summed and the rule's span
(first job's start to last job's end), the whole DAG's span, and the provenance of the machine."""

from __future__ import annotations

from pathlib import Path

from fp8rl.report.quote_format import QuoteError, markdown_table, num, quoted_block
from fp8rl.report.quotes_performance import benchmark_record, commit_and_machine

SMOKE_DAG = Path("benchmarks") / "smoke_dag.json"
STRESS_DAG = Path("benchmarks") / "stress_dag.json"
STARTUP = Path("benchmarks") / "process_startup.json"
# The smoke DAG from scratch before and after one evaluation process per run (rule `eval`), measured
# back to back on the same machine, each record from its own checkout.
EVAL_BEFORE = Path("benchmarks") / "smoke_dag_eval_per_suite.json"
EVAL_AFTER = Path("benchmarks") / "smoke_dag_eval_per_run.json"
EVAL_RULES_BEFORE = ("eval_lm", "eval_agent")
EVAL_RULE_AFTER = "eval"
SMOKE_TARGET_MIN = 5.0  # the whole smoke DAG, first job's start to last job's end
STRESS_TARGET_MIN = 20.0  # the stress tier's training: the `train` rule's span


def minutes(seconds: float) -> str:
    """`7 min 22 s`."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s"


def _verdict(seconds: float, target_min: float) -> str:
    return f"target ≤ {num(target_min, 0)} min: {'met' if seconds <= 60 * target_min else 'not met'}"


def _per_rule(record: dict) -> str:
    """Each rule's jobs and summed wall seconds, largest first."""
    rules = sorted(record["rules"].items(), key=lambda kv: -kv[1]["seconds_summed"])
    return ", ".join(
        f"{rule} {num(r['seconds_summed'], 0)} s ({r['jobs']} job{'s' if r['jobs'] > 1 else ''})"
        for rule, r in rules
    )


def _measured(record: dict) -> str:
    commit, where = commit_and_machine(record)
    return f"Measured at commit {commit} on {where}."


@quoted_block("performance-dag")
def performance_dag(published: Path) -> str:
    """Two paragraphs: the smoke DAG's span and the stress tier's training span, each against its target,
    with the per-rule split that sets them."""
    smoke = benchmark_record(published, SMOKE_DAG, "dag_time.py", "rules")
    stress = benchmark_record(published, STRESS_DAG, "dag_time.py", "rules")
    if "train" not in stress["rules"]:
        raise QuoteError(f"{published / STRESS_DAG}: no `train` jobs recorded")
    span = smoke["span_seconds"]
    train = stress["rules"]["train"]
    return (
        f"The smoke DAG ran in {minutes(span)} from its first job's start to its last job's end "
        f"({_verdict(span, SMOKE_TARGET_MIN)}); its jobs' wall seconds summed per rule (jobs run side by side, one per core): "
        f"{_per_rule(smoke)}. {_measured(smoke)}\n\n"
        f"The stress tier's {train['jobs']} training runs ran in {minutes(train['span_seconds'])} from "
        f"the first one's start to the last one's end ({_verdict(train['span_seconds'], STRESS_TARGET_MIN)}"
        f"); {num(train['seconds_summed'] / train['jobs'], 0)} s of wall time per run on average, "
        f"{num(train['cpu_seconds_summed'] / train['seconds_summed'], 2)} CPU seconds per wall second. "
        f"The whole tier: {_per_rule(stress)}. {_measured(stress)}"
    )


@quoted_block("performance-startup")
def performance_startup(published: Path) -> str:
    """A table and a sentence: per job kind of the smoke DAG, the median seconds a fresh process spends
    importing what that job imports, its mean job time in the smoke DAG record, and the share; then the
    imports summed over the DAG's jobs against all its job seconds."""
    startup = benchmark_record(published, STARTUP, "process_startup.py", "median_s")
    smoke = benchmark_record(published, SMOKE_DAG, "dag_time.py", "rules")
    rows, imports, total = [], 0.0, 0.0
    for kind, seconds in startup["median_s"].items():
        rule = smoke["rules"].get(kind)
        if rule is None:
            continue
        job = rule["seconds_summed"] / rule["jobs"]
        rows.append([kind, str(rule["jobs"]), num(seconds), num(job, 1), f"{num(100 * seconds / job, 0)} %"])
        imports += seconds * rule["jobs"]
    total = sum(r["seconds_summed"] for r in smoke["rules"].values())
    return (
        markdown_table(["job", "jobs in the smoke DAG", "imports (s)", "mean job (s)", "imports / job"], rows)
        + f"\n\nThe imports alone, summed over the smoke DAG's jobs: {num(imports, 0)} s of its {num(total, 0)} "
        f"job seconds ({num(100 * imports / total, 0)} %). Imports: the median of {startup['repeats']} fresh "
        f"processes per job kind, interleaved, {startup['threads']} thread each. {_measured(startup)}"
    )


def _eval_jobs(record: dict, rules: tuple[str, ...], path: Path) -> tuple[int, float, float]:
    """(jobs, wall seconds, CPU seconds) of the record's evaluation rules, summed."""
    missing = [r for r in rules if r not in record["rules"]]
    if missing:
        raise QuoteError(f"{path}: no `{missing[0]}` jobs recorded")
    found = [record["rules"][r] for r in rules]
    return (
        sum(r["jobs"] for r in found),
        sum(r["seconds_summed"] for r in found),
        sum(r["cpu_seconds_summed"] for r in found),
    )


def _arm(record: dict) -> str:
    """Where an arm ran: its `checkout` when the record names one (a commit with others applied), else
    its commit; the machine; the load average at its end."""
    commit, where = commit_and_machine(record)
    load = record.get("load_average_end")
    end = f" (1-minute load average {num(load[0])} at the end)" if load else ""
    return f"{record.get('checkout') or f'commit {commit}'} on {where}{end}"


@quoted_block("performance-dag-eval")
def performance_dag_eval(published: Path) -> str:
    """One paragraph: the smoke DAG before and after one evaluation process per run, its span and its
    evaluation jobs' summed wall and CPU seconds, each as after / before, with where each was measured."""
    before = benchmark_record(published, EVAL_BEFORE, "dag_time.py", "rules")
    after = benchmark_record(published, EVAL_AFTER, "dag_time.py", "rules")
    jobs_b, wall_b, cpu_b = _eval_jobs(before, EVAL_RULES_BEFORE, published / EVAL_BEFORE)
    jobs_a, wall_a, cpu_a = _eval_jobs(after, (EVAL_RULE_AFTER,), published / EVAL_AFTER)
    span_b, span_a = before["span_seconds"], after["span_seconds"]
    return (
        f"The smoke DAG from scratch ran in {minutes(span_b)} with one evaluation process per run and suite "
        f"({jobs_b} evaluation jobs, {num(wall_b, 0)} s of wall time and {num(cpu_b, 0)} CPU seconds summed) "
        f"and in {minutes(span_a)} with one per run ({jobs_a} jobs, {num(wall_a, 0)} s and {num(cpu_a, 0)} "
        f"CPU seconds): after / before {num(span_a / span_b)} for the whole DAG, {num(wall_a / wall_b)} for "
        f"the evaluations' wall time and {num(cpu_a / cpu_b)} for their CPU time. Before: measured at "
        f"{_arm(before)}; after: at {_arm(after)}."
    )
