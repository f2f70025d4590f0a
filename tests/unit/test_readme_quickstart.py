"""README.md's first ten minutes do what it says: the quickstart's three commands exist (make targets,
the study command) and `fp8rl study ratio-noise` prints the expected output the README shows; the
set-up section keeps its two commands; the output folders it names are the configs' own
`{results_dir}/{tier}`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.config_loader import load_config

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
EXPECTED = "<!-- expected output: .venv/bin/fp8rl study ratio-noise -->"


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _first_block(text: str) -> str:
    return re.search(r"```\w*\n(.*?)```", text, re.S).group(1)


def test_the_quickstart_opens_the_readme_with_three_commands_before_the_findings():
    assert README.index("## Quickstart") < README.index("## Results")
    commands = [line.split("#")[0].strip() for line in _first_block(_section("Quickstart")).splitlines()]
    assert commands == ["make install", ".venv/bin/fp8rl study ratio-noise", "make smoke"]


def test_the_setup_section_keeps_its_two_commands():
    commands = [
        line.split("#")[0].strip() for line in _first_block(_section("Set-up: the two commands")).splitlines()
    ]
    assert commands == ["make smoke", "make test"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("target", ["install", "smoke", "test"])
def test_each_make_target_the_readme_names_exists(target):
    proc = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ratio_noise_prints_the_output_the_readme_shows():
    shown = _first_block(README.split(EXPECTED, 1)[1])
    proc = subprocess.run(
        [sys.executable, "-m", "fp8rl.cli", "study", "ratio-noise"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    printed = [line.rstrip() for line in proc.stdout.splitlines()]
    for line in shown.splitlines():
        assert line.rstrip() in printed, (
            f"README's expected output has {line!r}, the command does not print it"
        )


@pytest.mark.parametrize("config", ["config/smoke.yaml", "config/ci.yaml"])
def test_the_output_folders_named_are_the_configs_own(config):
    cfg = load_config(REPO / config)
    assert f"`{cfg.results_dir}/{cfg.tier}/` for `{config}`" in " ".join(
        _section("Where outputs land").split()
    )
