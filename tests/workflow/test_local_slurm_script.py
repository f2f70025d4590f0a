"""scripts/local_slurm.sh refuses clearly where it cannot run (its cluster itself: test_slurm_cluster.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from workflow_helpers import REPO

SCRIPT = REPO / "scripts" / "local_slurm.sh"


def _as_non_root(*args: str) -> subprocess.CompletedProcess:
    if os.geteuid() != 0:
        cmd = [str(SCRIPT), *args]
    elif shutil.which("runuser"):
        cmd = ["runuser", "-u", "nobody", "--", str(SCRIPT), *args]
    else:
        pytest.skip("root without runuser: cannot run the script as another user")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("action", ["start", "stop"])
def test_it_needs_root_and_says_so(action):
    proc = _as_non_root(action)
    assert proc.returncode == 2, proc.stderr
    assert "must run as root" in proc.stderr and "sudo" in proc.stderr


def test_an_unknown_action_prints_the_usage():
    proc = subprocess.run([str(SCRIPT), "restart"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr and "start|stop|status" in proc.stderr
