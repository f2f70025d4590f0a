"""verl loads fp8rl's losses in a fresh process, the way every Ray worker does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = (
    "import verl.trainer.ppo.core_algos as ca; "
    "print(sorted(n for n in ca.POLICY_LOSS_REGISTRY if n in ('fp8rl_clip', 'calibrated_clip')))"
)


@pytest.mark.parametrize(
    ("plugins", "modules"),
    [("none", "fp8rl.adapters.verl_loss"), ("auto", "")],
    ids=["VERL_USE_EXTERNAL_MODULES", "verl.plugins entry point"],
)
def test_fresh_verl_process_registers_the_losses(verl_site, plugins, modules):
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS=plugins, VERL_USE_EXTERNAL_MODULES=modules)
    res = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "['calibrated_clip', 'fp8rl_clip']"
