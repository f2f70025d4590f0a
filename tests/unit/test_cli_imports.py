"""What the `fp8rl` command and the Snakefile import before any handler runs: no torch, no ML library.

Every Snakemake invocation imports fp8rl's config modules to build the DAG, and every `fp8rl` process
builds the whole argument parser before its handler runs; `fp8rl matrix` answers without torch. A
fresh interpreter checks `sys.modules`, since this test process itself has long imported torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pandas", "lm_eval", "datasets", "matplotlib")

PROBE = """
import contextlib, io, json, sys
from fp8rl.cli import main
from fp8rl.config import expand_matrix, resolve_run
from fp8rl.config_loader import validate_config
from fp8rl.validation import CONFIG_CHECKS
from fp8rl.engine.data import DATA_TASKS
from fp8rl.evaluate.schema import samples_path
from fp8rl.report.paths import report_outputs
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["matrix", "config/smoke.yaml", "--ids-only"])
print(json.dumps({"code": code, "runs": len(out.getvalue().split()),
                  "heavy": [m for m in HEAVY if m in sys.modules]}))
"""


def test_the_parser_the_matrix_and_the_dag_modules_import_no_ml_library():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["code"] == 0
    assert probe["runs"] == 24  # the smoke matrix: 2 algorithms x 4 variants x 3 seeds
    assert probe["heavy"] == [], f"imported while building the parser or the DAG: {probe['heavy']}"
