"""SUMMARY.md is written from a tier's tables alone (fp8rl.report.summary_page): the page the code writes
today from a publication's tables, run counts and numerics is that publication's SUMMARY.md, byte for
byte, so a change to the page's code that would change a published page fails here without the tier's
runs. The tiers listed are those whose publication the current code reproduces; a tier re-published
after a deliberate change of its page joins the list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.config_loader import load_config
from fp8rl.report.summary_page import summary_page

REPO = Path(__file__).resolve().parents[3]
# tier -> (config, the `--set`s that give the config as the publication's report read it)
TIERS = {
    "learn": ("config/learn.yaml", []),
    "longform": ("config/longform.yaml", []),  # the failure search, with its acceptance read again
    "mechanism": ("config/mechanism.yaml", []),
}


@pytest.mark.parametrize("tier", sorted(TIERS))
def test_the_summary_page_of_a_publication_is_what_its_tables_give(tier):
    published = REPO / "results" / "published" / tier
    manifest = json.loads((published / "report.json").read_text(encoding="utf-8"))
    path, overrides = TIERS[tier]
    cfg = load_config(REPO / path, overrides)
    assert cfg.digest() == manifest["config_digest"]  # the config the publication was made with
    page = summary_page(
        cfg, published / "tables", manifest["control"]["comparison_void"], manifest["numerics"]
    )
    assert page == (published / "SUMMARY.md").read_text(encoding="utf-8")
