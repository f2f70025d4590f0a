"""What a DAG job pays before its work starts: the wall seconds a fresh interpreter takes to import what
each of the smoke tier's job kinds imports, measured side by side in one run, interleaved.

A smoke DAG job is one process (`fp8rl train`, `fp8rl eval run lm_eval agent`; on the cluster path
`fp8rl eval lm-eval` and `fp8rl eval agent` apart); each starts a
Python interpreter and imports torch, transformers, torchao and, for the evaluations, lm-eval, before
its first step. This script times, in a fresh process per sample, the imports of each kind (the modules
its command imports on its way to work, listed in `KINDS`) and a bare interpreter, `--repeats` times
each, interleaved (every kind once, then again), and prints the median wall seconds per kind. With a
DAG record (`benchmarks/dag_time.py --json`) it also prints each rule's mean job wall time and the share
of it that the imports alone take.

    python benchmarks/process_startup.py [--repeats 5] [--threads 1] \
        [--dag results/published/benchmarks/smoke_dag.json] [--json results/benchmarks/process_startup.json]

Run it on an idle machine: the imports are single-threaded disk and CPU work, and a busy machine slows
them as it slows the jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The modules each job kind imports before its work starts, its command's lazy imports included (read
# from `python -X importtime` of each command): training imports the trainer (torch, transformers,
# torchao); both evaluations import torch, transformers and lm-eval's task machinery (the agent
# benchmark plans its tasks with it), lm-eval's runs also its evaluator and `hf` model.
_EVAL = ["fp8rl.commands.evaluate", "torch", "transformers", "fp8rl.engine.model", "fp8rl.evaluate.eval_tasks",
         "lm_eval.tasks", "lm_eval.config.task"]  # fmt: skip
KINDS = {
    "python": [],
    "train": ["fp8rl.commands.train", "fp8rl.engine.trainer"],
    "sft": ["fp8rl.commands.train", "fp8rl.engine.sft"],
    "eval_lm": [
        *_EVAL,
        "fp8rl.evaluate.lm_eval_runner",
        "lm_eval",
        "lm_eval.evaluator",
        "lm_eval.models.huggingface",
    ],
    "eval_agent": [*_EVAL, "fp8rl.evaluate.bfcl"],
}
# On the host the DAG runs a run's suites in one process (rule `eval`, `fp8rl eval run`): both sets.
KINDS["eval"] = list(dict.fromkeys([*KINDS["eval_lm"], *KINDS["eval_agent"], "fp8rl.evaluate.suites"]))
TIMER = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"


def time_imports(modules: list[str], threads: int) -> float:
    """Wall seconds from a fresh interpreter's start to the end of its imports."""
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", TIMER, *modules], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"importing {' '.join(modules)} failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--threads", type=int, default=1, help="torch/OpenMP threads of each process (as a DAG job)"
    )
    p.add_argument(
        "--dag", type=Path, help="a dag_time.py record: print each rule's job time beside the imports"
    )
    p.add_argument("--json", type=Path, help="also write the medians and every sample there (JSON)")
    args = p.parse_args(argv)
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    for i in range(args.repeats):
        for kind, modules in KINDS.items():
            samples[kind].append(time_imports(modules, args.threads))
        print(f"repeat {i + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    jobs = {}
    if args.dag:
        rules = json.loads(args.dag.read_text(encoding="utf-8"))["rules"]
        jobs = {k: rules[k]["seconds_summed"] / rules[k]["jobs"] for k in KINDS if k in rules}
    print(f"{'kind':<12}{'imports (s)':>12}{'job (s)':>10}{'share':>8}")
    for kind, med in medians.items():
        job = jobs.get(kind)
        share = f"{med / job:.0%}" if job else ""
        print(f"{kind:<12}{med:>12.2f}{(f'{job:.1f}' if job else ''):>10}{share:>8}")
    if args.json:
        from fp8rl.provenance import provenance

        record = {
            "benchmark": "process_startup",
            "repeats": args.repeats,
            "threads": args.threads,
            "load_average_end": list(os.getloadavg()),
            "median_s": medians,
            "samples_s": samples,
            "job_mean_s": jobs,
            "provenance": provenance(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
