"""Make verl importable for the adapter tests, or skip them with the command that installs it.

verl cannot be installed into the main environment (its pins clash with it), so
`scripts/verl_test_env.sh` installs it without dependencies into `build/verl-site` (or
`$FP8RL_VERL_SITE`); it is appended to `sys.path`, so the main environment's packages still win.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VERL_SITE = Path(os.environ.get("FP8RL_VERL_SITE", ROOT / "build" / "verl-site"))


@pytest.fixture(scope="session")
def verl_site() -> Path:
    if not (VERL_SITE / "verl").is_dir():
        pytest.skip(
            f"verl is not installed for the CPU tests: run scripts/verl_test_env.sh (looked in {VERL_SITE})"
        )
    if str(VERL_SITE) not in sys.path:
        sys.path.append(str(VERL_SITE))
    return VERL_SITE
