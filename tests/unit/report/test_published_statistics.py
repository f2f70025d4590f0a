"""The published tables' statistics rebuild, byte for byte, from the published per-run endpoints.

`endpoints.csv` carries the one value per run that every interval and test aggregates (fp8rl.report.
endpoints). Recomputing from it with today's fp8rl.report.stats gives the same bytes as the published
`planned.csv`, `exploratory.csv`, `control.csv`, the arms' intervals and the stability table's exact
count intervals and Fisher tests: moving a statistic onto scipy did not move a published number."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from fp8rl.config_loader import load_config
from fp8rl.report.control import control_table
from fp8rl.report.planned import contrasts_table
from fp8rl.report.stats import clopper_pearson, fisher_p, t_interval

REPO = Path(__file__).resolve().parents[3]
PUBLISHED = REPO / "results" / "published"
FLOAT = "%.6g"  # what the report writes its tables with (fp8rl.report.build)


def published(tier: str, table: str) -> pd.DataFrame:
    return pd.read_csv(PUBLISHED / tier / "tables" / f"{table}.csv", keep_default_na=False, na_values=[""])


def csv_bytes(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format=FLOAT)


def study_endpoints(tier: str) -> pd.DataFrame:
    """endpoints.csv with one row per (arm, run): a run in several arms (`;`-joined) counts in each."""
    ep = published(tier, "endpoints")
    ep = ep[ep["arm"].notna()].assign(arm=lambda f: f["arm"].str.split(";")).explode("arm")
    return ep[["arm", "run_id", "status", "endpoint"]].reset_index(drop=True)


@pytest.fixture(scope="module")
def learn_config():
    cfg = load_config(str(REPO / "config" / "learn.yaml"), [])
    provenance = json.loads((PUBLISHED / "learn" / "provenance.json").read_text())
    if cfg.digest() != provenance["config_digest"]:
        pytest.skip("config/learn.yaml changed since results/published/learn was published")
    return cfg


@pytest.mark.parametrize("planned", [True, False], ids=["planned", "exploratory"])
def test_contrasts_rebuild_from_the_published_endpoints(learn_config, planned):
    table = contrasts_table(study_endpoints("learn"), learn_config.study, planned=planned)
    name = "planned" if planned else "exploratory"
    assert csv_bytes(table) == (PUBLISHED / "learn" / "tables" / f"{name}.csv").read_text()


def test_arm_intervals_rebuild_from_the_published_endpoints():
    arms = published("learn", "arms")
    ep = study_endpoints("learn")
    for r in arms.itertuples(index=False):
        ci = t_interval(ep[ep["arm"] == r.arm]["endpoint"])
        assert ci.n == r.n
        for ours, theirs in ((ci.estimate, r.endpoint), (ci.low, r.low), (ci.high, r.high)):
            assert FLOAT % ours == FLOAT % theirs


@pytest.mark.parametrize("tier", ["smoke", "ci", "learn", "mechanism"])
def test_control_rebuilds_from_the_published_endpoints(tier):
    ep = published(tier, "endpoints")
    text = (PUBLISHED / tier / "tables" / "control.csv").read_text()
    assert csv_bytes(control_table(ep)) == text


def test_count_intervals_and_fisher_tests_rebuild_from_the_published_counts():
    stab = published("learn", "stability")
    for r in stab.itertuples(index=False):
        low, high = clopper_pearson(int(r.diverged), int(r.runs))
        assert (FLOAT % low, FLOAT % high) == (FLOAT % r.diverged_low, FLOAT % r.diverged_high)
        if isinstance(r.vs, str):
            k, n = (int(v) for v in r.vs_diverged.split("/"))
            ours = fisher_p(int(r.diverged), int(r.runs), k, n)
            assert FLOAT % ours == FLOAT % r.fisher_p
        else:
            assert math.isnan(r.fisher_p)
