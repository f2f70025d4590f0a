"""The attribution tier's base-model sentence is read from the published base table and the runs' own
numerics record: checked against a copy of the published tier, and refused where the tier has more than
the one base its design names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from fp8rl.report.quote_format import QuoteError
from fp8rl.report.quotes_attribution import attribution_base

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published" / "attribution"


@pytest.fixture
def published(tmp_path):
    tier = tmp_path / "attribution"
    (tier / "tables").mkdir(parents=True)
    for name in ("report.json", "provenance.json", "tables/base_models.csv"):
        shutil.copy(PUBLISHED / name, tier / name)
    return tmp_path


def test_the_sentence_carries_the_published_base_and_its_kernel_path(published):
    base = pd.read_csv(published / "attribution" / "tables" / "base_models.csv").iloc[0]
    text = attribution_base(published)
    assert (
        f"{100 * base['acc/test_greedy']:.1f} % greedy / {100 * base['acc/test_sampled']:.1f} % sampled"
        in text
    )
    assert f"({int(base['n_test'])} prompts)" in text and f"final SFT loss {base['loss/final']:.3f}" in text
    assert "under MKL's `" in text and "branch" in text


def test_more_than_one_base_is_refused(published):
    path = published / "attribution" / "tables" / "base_models.csv"
    table = pd.read_csv(path)
    pd.concat([table, table]).to_csv(path, index=False)
    with pytest.raises(QuoteError, match="2 bases, expected one"):
        attribution_base(published)
