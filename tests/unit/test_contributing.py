"""CONTRIBUTING.md says how to add a correction, a recipe, an eval task or suite and a tier: every repository
path it names exists, every path of its examples' kind lies where it says, and its links resolve."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
ROOTS = ("fp8rl/", "tests/", "config/", "evals/", "workflows/", "docs/")


def test_every_path_it_names_exists():
    paths = [p for p in re.findall(r"`([^`\s]+)`", TEXT) if p.startswith(ROOTS) and "<" not in p]
    assert len(paths) >= 10
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_the_places_it_names_for_a_new_thing_are_where_the_registries_look():
    from fp8rl import vocabulary

    for template in (
        "fp8rl/rl/corrections/<name>.py", "fp8rl/fp8/recipes/<name>.py", "fp8rl/evaluate/suites/<name>.py",
        "config/<tier>.yaml",
    ):  # fmt: skip
        assert f"`{template}`" in TEXT
    assert vocabulary.CORRECTIONS_DIR == REPO / "fp8rl" / "rl" / "corrections"
    assert vocabulary.RECIPES_DIR == REPO / "fp8rl" / "fp8" / "recipes"
    assert vocabulary.EVAL_SUITES_DIR == REPO / "fp8rl" / "evaluate" / "suites"
    for template in ("evals/lm_eval/<name>.yaml", "evals/agent/<name>.yaml"):
        assert f"`{template}`" in TEXT and (REPO / template).parent.is_dir()


def test_its_links_resolve_and_it_quotes_no_figures():
    for target in re.findall(r"\]\(([^)\s#]+)", TEXT):
        assert (REPO / target).exists(), target
    assert not re.search(r"\d\.\d", TEXT)
