"""A new evaluation suite is one file plus its test (CONTRIBUTING.md): a module of fp8rl/evaluate/suites/
named after the suite it registers. This test adds one, `echo`, to a copy of the package and checks, in
fresh interpreters, that nothing else needs an edit: the vocabulary and the run directory have it, a
config turns it on with its options under `eval.suites` (bad options named by key), `fp8rl eval echo`
and `fp8rl eval run ... echo` score a checkpoint with it, and the DAG runs it in each run's one `eval`
job with its result file an input of the report."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]

ECHO = '''"""`echo`: a test suite, one file: the size of the checkpoint's config.json, times its option `scale`."""

from __future__ import annotations

from pydantic import BaseModel

from fp8rl.evaluate.suites._registry import EvalSuite, SuiteJob, register_suite


class Options(BaseModel):
    scale: float = 1.0


def run(job: SuiteJob) -> None:
    from fp8rl.evaluate.schema import TaskResult, write_eval

    size = (job.checkpoint / "config.json").stat().st_size * job.options.scale
    write_eval(job.out, job.checkpoint, "echo", [TaskResult("echo", "size", size, None, 1)], {})
    print(f"echo size {size}")


SUITE = register_suite(
    EvalSuite(
        name="echo",
        command="echo",
        help="the size of the checkpoint's config -> eval/echo.json",
        usage="""
Writes the size of the checkpoint's config.json, times `eval.suites.echo.scale`.

    fp8rl eval echo --config config/ci.yaml --data results/ci/smoke/data --checkpoint DIR --out /tmp/echo.json
""",
        run=run,
        data="test",
        sections=("eval",),
        role="eval",
        rule="eval_echo",
        options=Options,
    )
)
'''

PROBE = """
import json, sys
from pathlib import Path
from fp8rl import vocabulary
from fp8rl.cli import main
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.evaluate.suites import REGISTRY, eval_jobs
from fp8rl.run_files import EVAL_FILES
from fp8rl.validation import CONFIG_CHECKS

config, checkpoint, data, out = (Path(a) for a in sys.argv[1:5])
cfg = load_config(config, checks=CONFIG_CHECKS)
try:
    load_config(config, ["eval.suites.echo.scale=big"], checks=CONFIG_CHECKS)
    bad = None
except ConfigError as exc:
    bad = str(exc)
common = ["--config", str(config), "--checkpoint", str(checkpoint), "--data", str(data)]
rc_one = main(["eval", "echo", *common, "--out", str(out / "one" / "echo.json")])
rc_run = main(["eval", "run", "echo", *common, "--out-dir", str(out / "run")])
print(json.dumps({
    "suites": list(vocabulary.EVAL_SUITES),
    "file": EVAL_FILES.get("echo"),
    "registered": "echo" in REGISTRY,
    "jobs": [[j.rule, [s.name for s in j.suites]] for j in eval_jobs(cfg, lambda role: "")],
    "bad": bad,
    "rc": [rc_one, rc_run],
    "scores": [json.loads((out / d / "echo.json").read_text())["results"][0]["value"] for d in ("one", "run")],
}))
"""


def _env(root: Path) -> dict:
    """The copy first on the path; the task YAMLs are the repository's (`evals/`)."""
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "OPENBLAS_CORETYPE": "Haswell",
        "FP8RL_EVALS_DIR": str(REPO / "evals"),
    }


def test_a_new_suite_is_one_file(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(REPO / "fp8rl", root / "fp8rl", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "fp8rl" / "evaluate" / "suites" / "echo.py").write_text(ECHO)
    data = yaml.safe_load((REPO / "config" / "ci.yaml").read_text())
    data["eval"]["suites"] = {"echo": {"scale": 2.0}}
    data["results_dir"] = str(tmp_path / "results")
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump(data))
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"model_type": "llama"}')

    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(config), str(checkpoint), str(tmp_path), str(tmp_path / "out")],
        cwd=root, env=_env(root), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["suites"] == ["lm_eval", "agent", "heldout", "heldout_history", "echo"] and got["registered"]
    assert got["file"] == "eval/echo.json"
    assert got["jobs"] == [["eval", ["lm_eval", "agent", "echo"]]]
    assert "eval.suites.echo" in got["bad"] and "scale" in got["bad"]
    size = 2.0 * (checkpoint / "config.json").stat().st_size
    assert got["rc"] == [0, 0] and got["scores"] == [size, size]

    # the DAG of a checkout with the new file (Snakemake puts the Snakefile's folder first on the path)
    shutil.copy(REPO / "Snakefile", root)
    shutil.copytree(REPO / "workflows", root / "workflows", ignore=shutil.ignore_patterns("__pycache__"))
    dag = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "--directory", str(root), "-n", "-p",
         "--configfile", str(config)],
        cwd=root, env=_env(root), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert dag.returncode == 0, dag.stderr
    evals = [b for b in dag.stdout.split("\n\n") if "rule eval:" in b]
    assert len(evals) == 3 and all("fp8rl eval run lm_eval agent echo " in b for b in evals)
    report = next(b for b in dag.stdout.split("\n\n") if "rule report:" in b)
    assert len(re.findall(r"/eval/echo\.json", report.split("output:")[0])) == 3
