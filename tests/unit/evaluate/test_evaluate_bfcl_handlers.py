"""The BFCL model handlers: the shipped list is the pinned bfcl-eval's own, and a config naming a handler
bfcl-eval does not have is refused by `fp8rl config validate` (bfcl-eval would fail at its first prompt)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.config_loader import ConfigError, load_config
from fp8rl.evaluate.bfcl import HANDLERS_FILE, bfcl_problems, known_handlers
from fp8rl.validation import CONFIG_CHECKS

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = Path(os.environ.get("FP8RL_UPSTREAM_SRC", ROOT / "build" / "upstream"))
PAPER = ROOT / "config" / "paper.yaml"


def test_the_handler_list_is_the_pinned_bfcl_evals():
    if not (UPSTREAM / "bfcl_eval").is_dir():
        pytest.skip(
            f"needs the pinned upstream sources: run scripts/upstream_src.sh (no {UPSTREAM}/bfcl_eval)"
        )
    spec = importlib.util.spec_from_file_location("bfcl_handlers", ROOT / "scripts" / "bfcl_handlers.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert known_handlers() == set(script.handler_names(UPSTREAM))
    pin = next(line for line in (ROOT / "containers/bfcl/requirements.lock").read_text().splitlines()
               if line.startswith("bfcl-eval=="))  # fmt: skip
    assert HANDLERS_FILE.read_text().startswith(f"# {pin.split()[0]}:")  # written from the pinned release


def test_every_paper_model_has_a_handler_bfcl_eval_knows():
    paper = load_config(PAPER, checks=CONFIG_CHECKS)
    assert bfcl_problems(paper) == []
    assert {m.bfcl_handler for m in paper.models} <= known_handlers()


def test_an_unknown_handler_is_refused_naming_the_models_key(tmp_path):
    text = PAPER.read_text()
    assert "bfcl_handler: Qwen/Qwen3-32B," in text
    bad = tmp_path / "paper.yaml"
    bad.write_text(text.replace("bfcl_handler: Qwen/Qwen3-32B,", "bfcl_handler: Qwen/Qwen2.5-32B-Instruct,"))
    with pytest.raises(ConfigError) as err:
        load_config(bad, checks=CONFIG_CHECKS)
    msg = str(err.value)
    assert (
        "models.2.bfcl_handler" in msg
        and "Qwen/Qwen2.5-32B-Instruct" in msg
        and "closest names: Qwen/Qwen3-" in msg
    )
    out = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "config", "validate", str(bad)], capture_output=True, text=True
    )
    assert out.returncode == 2 and "models.2.bfcl_handler" in out.stderr


def test_tiers_without_bfcl_are_not_checked():
    smoke = load_config(ROOT / "config" / "smoke.yaml")
    assert not any(t.startswith("bfcl_") for t in smoke.eval.agent) and bfcl_problems(smoke) == []
