"""Run the tests that import verl in a child pytest whose sys.path starts with build/verl-site."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VERL_SITE = Path(os.environ.get("FP8RL_VERL_SITE", ROOT / "build" / "verl-site"))
IN_VERL_ENV = os.environ.get("FP8RL_VERL_ENV") == "1"

VERL_TESTS = [
    "test_adapters_verl_loss.py",
    "test_adapters_verl_dp.py",
    "test_adapters_verl_acc.py",
    "test_adapters_verl_logs.py",
    "test_adapters_verl_compose.py",
    "test_adapters_verl_plugin.py",
    "test_adapters_verl_corrections.py",
    "test_adapters_verl_icepop.py",
    "test_adapters_verl_qurl.py",
    "test_adapters_verl_upstream.py",
    "test_adapters_verl_rehearse.py",
    "test_adapters_verl_report.py",
    "test_adapters_verl_ckpt.py",
    "test_adapters_verl_sizing.py",
    "test_adapters_verl_quoting.py",
]


@pytest.mark.skipif(IN_VERL_ENV, reason="already inside the verl environment")
def test_verl_tests_pass_in_the_verl_environment():
    if not (VERL_SITE / "verl").is_dir():
        pytest.skip(
            f"verl is not installed for the CPU tests: run scripts/verl_test_env.sh (looked in {VERL_SITE})"
        )
    here = os.path.dirname(__file__)
    env = dict(os.environ, FP8RL_VERL_ENV="1", FP8RL_VERL_SITE=str(VERL_SITE))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(VERL_SITE), env.get("PYTHONPATH", "")) if p)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
         *(os.path.join(here, t) for t in VERL_TESTS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=2700,
    )  # fmt: skip
    tail = res.stdout[-6000:] + res.stderr[-3000:]
    assert res.returncode == 0, tail
    assert " passed" in res.stdout and " skipped" not in res.stdout, tail
