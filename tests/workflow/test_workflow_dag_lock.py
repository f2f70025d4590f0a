"""One DAG per tier's results: a second DAG started from another working directory on the same
results_dir (Snakemake's own lock is per working directory) exits 2 naming the first, before any job,
so it overwrites none of the first one's outputs or logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import yaml
from workflow_helpers import snakemake, write_config

HOLD = (
    "import sys; from fp8rl.locks import hold_lock\n"
    "with hold_lock(sys.argv[1], 'the first DAG'):\n"
    "    print('held', flush=True); sys.stdin.read()\n"
)


def test_a_second_dag_on_the_same_results_exits_2_before_any_job(tmp_path):
    results = tmp_path / "results"
    config = write_config(tmp_path / "c.yaml", "config/ci.yaml", f"results_dir={results}")
    tier_dir = results / yaml.safe_load(config.read_text())["tier"]
    log = tier_dir / "logs" / "data" / "data.log"
    log.parent.mkdir(parents=True)
    log.write_text("the first DAG's log\n")
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(tier_dir / "dag.lock")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert first.stdout.readline().strip() == "held"
        (tmp_path / "elsewhere").mkdir()
        proc = snakemake(tmp_path / "elsewhere", "--configfile", str(config), "-c1", check=False, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert f"another DAG runs on {tier_dir}" in proc.stderr and f"pid {first.pid}" in proc.stderr
        assert log.read_text() == "the first DAG's log\n"
        assert sorted(p.name for p in tier_dir.iterdir()) == ["dag.lock", "logs"]  # no job ran
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
