"""verl loads fp8rl's losses in a fresh process, the way every Ray worker does."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import verl.trainer.ppo.core_algos as ca; "
    "print(sorted(n for n in ca.POLICY_LOSS_REGISTRY if n in ('fp8rl_clip', 'calibrated_clip')))"
)


def test_fresh_verl_process_registers_the_losses(verl_site):
    """What the job script exports for every Ray worker: VERL_USE_EXTERNAL_MODULES (entry points off)."""
    env = dict(
        os.environ, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="fp8rl.adapters.verl_loss"
    )
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "['calibrated_clip', 'fp8rl_clip']"
