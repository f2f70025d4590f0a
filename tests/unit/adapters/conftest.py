"""verl for the adapter tests: its own process, with `build/verl-site` first on `sys.path`.

verl cannot be installed into the main environment (its pins clash with it, and the antlr4 runtime its
Hydra/OmegaConf grammars need is older than the one math-verify needs), so `scripts/verl_test_env.sh`
installs it without dependencies into `build/verl-site` (or `$FP8RL_VERL_SITE`).
`test_adapters_verl_env.py` runs the tests that use verl in a child pytest with that folder first on
`PYTHONPATH` and `FP8RL_VERL_ENV=1`; in the main process their `verl_site` fixture skips them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VERL_SITE = Path(os.environ.get("FP8RL_VERL_SITE", ROOT / "build" / "verl-site"))
IN_VERL_ENV = os.environ.get("FP8RL_VERL_ENV") == "1"


@pytest.fixture(scope="session")
def verl_site() -> Path:
    if not IN_VERL_ENV:
        pytest.skip("needs verl: runs in its own process through test_adapters_verl_env.py")
    return VERL_SITE
