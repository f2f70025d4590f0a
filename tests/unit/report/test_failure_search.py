"""A mismatch-axis search's failure rule (fp8rl.report.failure_search) read off a report built by the real
report pipeline from runs written as the trainer writes them: which setting fails and why, the lowest-KL
failing setting chosen, the branch where none fails, an incomplete search deciding nothing, and the
config's checks of the `failure_search` section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config import ExperimentConfig
from fp8rl.report.failure_search import decide

STEPS = 6
SEEDS = (0, 1, 2, 3)
CONDITIONS = {"kl_lo": 1e-3, "kl_hi": 1e-1}


def _config_dict(tmp_path: Path) -> dict:
    arms = {"bf16": "grpo/m/bf16/none/none"}
    for variant in ("fp8", "fp8_tis"):
        for cond in CONDITIONS:
            arms[f"{variant}_{cond}"] = f"grpo/m/{variant}/tensorwise/{cond}"
    return {
        "tier": "sweep",
        "results_dir": str(tmp_path),
        "models": [{"name": "m", "source": "scratch"}],
        "task": {"name": "arithmetic"},
        "sft": {"per_seed": True},
        "matrix": {
            "algorithms": ["grpo"], "models": ["m"], "variants": ["bf16", "fp8", "fp8_tis"],
            "granularities": ["tensorwise"], "seeds": list(SEEDS),
            "conditions": [{"name": c, "fp8": {"target_kl": kl}} for c, kl in CONDITIONS.items()],
        },
        "schedule": {"steps": STEPS},
        "stability": {"on_divergence": "continue"},
        "eval": {"heldout": {"prompts": 16, "samples": 1}},
        "study": {
            "unit": "base", "arms": arms, "endpoint": {"metric": "heldout/sampled_reward"},
            "min_effect": 0.1, "planning_sd": 0.05, "min_seeds": 4,
            "planned": [{"name": f"tis_{c}_vs_bf16", "arm": f"fp8_tis_{c}", "reference": "bf16"}
                        for c in CONDITIONS],
        },
        "failure_search": {"decisive": "fp8_tis", "reference": "bf16"},
    }  # fmt: skip


def _heldout(path: Path, value: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"suite": "heldout", "results": [{"task": "heldout", "metric": "sampled_reward", "value": value,
                                            "stderr": 0.01, "n": 16}]}  # fmt: skip
    path.write_text(json.dumps(doc))


def _write_tier(cfg: ExperimentConfig, diverged: dict[str, int], loss: dict[str, float], skip=()) -> None:
    """Every run of the matrix with metrics.jsonl, summary.json and its held-out score, and each base's
    held-out score. `diverged`: condition -> how many fp8_tis runs a detector flagged (at step 3);
    `loss`: condition -> the fp8_tis arm's held-out score below bf16 (plus a small per-base wobble)."""
    tier = Path(cfg.results_dir) / cfg.tier
    for seed in SEEDS:
        _heldout(tier / "base" / f"m/seed{seed}" / "eval" / "heldout.json", 0.3)
    for spec in cfg.runs():
        if spec.run_id in skip:
            continue
        root = tier / "runs" / spec.run_id
        root.mkdir(parents=True)
        cond, tis = spec.condition, spec.variant == "fp8_tis"
        flagged = tis and spec.seed < diverged.get(cond, 0)
        lines = [{"step": s, "reward/mean": 0.3 + 0.01 * s, "acc/mean": 0.3,
                  "entropy": 2.0 if flagged and s >= 3 else 0.4, "gibberish/rate": 0.0}
                 for s in range(1, STEPS + 1)]  # fmt: skip
        (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        summary = {"run_id": spec.run_id, "status": "diverged" if flagged else "ok", "reason": None,
                   "step": STEPS, "steps_planned": STEPS, "final": lines[-1]}  # fmt: skip
        if flagged:
            summary["divergence"] = {"kind": "entropy_spike", "step": 3, "reason": "entropy_spike at step 3"}
            summary["reason"] = "entropy_spike at step 3"
        (root / "summary.json").write_text(json.dumps(summary))
        score = 0.45 + 0.01 * spec.seed
        if tis:
            score -= loss.get(cond, 0.0) + (0.004 if spec.seed % 2 else -0.004)
        _heldout(root / "eval" / "heldout.json", score)


def _decided(tmp_path, diverged, loss, skip=()):
    from fp8rl.report.build import build_report

    cfg = ExperimentConfig.model_validate(_config_dict(tmp_path))
    _write_tier(cfg, diverged, loss, skip)
    build_report(cfg)
    return decide(cfg)


@pytest.mark.slow
def test_the_lowest_failing_setting_is_chosen_and_each_reason_is_named(tmp_path):
    # kl_hi: 3 of 4 TIS runs diverge; kl_lo: no divergence but a clear held-out loss of 0.2
    result = _decided(tmp_path, diverged={"kl_hi": 3}, loss={"kl_lo": 0.2})
    rows = {r["condition"]: r for r in result["rows"]}
    assert [r["condition"] for r in result["rows"]] == ["kl_lo", "kl_hi"]  # ordered by target KL
    assert result["complete"]
    assert (rows["kl_hi"]["diverged"], rows["kl_hi"]["trained"], rows["kl_hi"]["fails"]) == (3, 4, True)
    assert "3 of 4 runs diverged" in rows["kl_hi"]["why"]
    assert rows["kl_lo"]["diverged"] == 0 and rows["kl_lo"]["fails"]
    assert rows["kl_lo"]["heldout_difference"] == pytest.approx(-0.2, abs=1e-9)
    assert "held-out loss" in rows["kl_lo"]["why"]
    assert result["decision"].startswith("compare corrections at kl_lo (target KL 0.001)")
    _check_published_with_the_report(tmp_path, result)


def _check_published_with_the_report(tmp_path: Path, result: dict) -> None:
    """The report wrote the search's rows (tables/failure_search.csv), its decision in the table's notes
    and in SUMMARY.md: the same as `decide` reads off the survival and planned tables."""
    import pandas as pd

    from fp8rl.report.failure_search import COLUMNS, decision_of

    tier = tmp_path / "sweep"
    table = pd.read_csv(tier / "tables" / "failure_search.csv", keep_default_na=False, na_values=[""])
    assert list(table.columns) == COLUMNS
    assert table["condition"].tolist() == [r["condition"] for r in result["rows"]]
    assert table["fails"].tolist() == [r["fails"] for r in result["rows"]]
    assert table["diverged"].tolist() == [r["diverged"] for r in result["rows"]]
    assert decision_of(table) == (result["complete"], result["decision"])
    notes = (tier / "tables" / "failure_search.md").read_text()
    summary = (tier / "SUMMARY.md").read_text()
    verdict = f"**Decision**: {result['decision']}." if result["complete"] else "**Incomplete: not every run"
    assert verdict in notes and verdict in summary
    section = summary.split("## The failure search", 1)[1].split("\n## ", 1)[0]
    for r in result["rows"]:  # one row per setting, failing ones marked with their reason
        line = next(x for x in section.splitlines() if x.startswith(f"| {r['condition']} |"))
        assert (f"**yes**: {r['why']}" if r["fails"] else "| no |") in line
        assert f"{r['diverged']} of {r['trained']}" in line
    # published without its config (`fp8rl publish TIER`), the report's parts come from its report.json:
    # the search's table travels, and the publication verifies whole
    from fp8rl.publication.publish import publish_tier, verify_publication

    dest = publish_tier("sweep", tmp_path)
    verify_publication(dest)
    assert (dest / "tables" / "failure_search.csv").read_bytes() == (
        tier / "tables" / "failure_search.csv"
    ).read_bytes()
    # the docs' quoted block reads the same rows off the publication, and quotes no incomplete search
    import shutil

    from fp8rl.quotes.files import BLOCKS
    from fp8rl.quotes.registry import QuoteError

    published = tmp_path / "published"
    shutil.copytree(tier / "tables", published / "longform" / "tables")
    quote = BLOCKS["longform-failure-search"]
    if not result["complete"]:
        with pytest.raises(QuoteError, match="the published failure search is incomplete"):
            quote(published)
        return
    text = quote(published)
    assert text.split("\n\n")[0] in section  # the table, as SUMMARY.md has it
    assert text.endswith(f"**Decision**: {result['decision']}.")


@pytest.mark.slow
def test_when_no_setting_fails_the_search_is_the_result(tmp_path, capsys):
    # one divergence in four (below half) and no held-out loss: nothing fails
    result = _decided(tmp_path, diverged={"kl_hi": 1}, loss={})
    assert result["complete"] and not any(r["fails"] for r in result["rows"])
    assert result["decision"] == (
        "no setting up to target KL 0.1 fails: the search is the result; no comparison is run"
    )
    _check_published_with_the_report(tmp_path, result)


@pytest.mark.slow
def test_an_incomplete_search_decides_nothing(tmp_path):
    result = _decided(
        tmp_path, diverged={"kl_hi": 4}, loss={}, skip={"grpo/m/fp8_tis/tensorwise/kl_hi/seed3"}
    )
    assert not result["complete"]
    assert result["decision"].startswith("incomplete")
    assert {r["condition"]: r["fails"] for r in result["rows"]}["kl_hi"]  # seen, reported, not acted on
    _check_published_with_the_report(tmp_path, result)


def test_the_checker_needs_a_built_report(tmp_path, capsys):
    cfg_file = tmp_path / "sweep.yaml"
    import yaml

    cfg_file.write_text(yaml.safe_dump(_config_dict(tmp_path)))
    assert main(["decide", "failure-search", "--config", str(cfg_file)]) == 2
    assert "study_survival.csv: missing; build the tier's report first" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["failure_search"].update(reference="nope"),
            "failure_search.reference: 'nope' is no study arm",
        ),
        (lambda d: d["study"]["arms"].pop("fp8_tis_kl_lo"), "no study arm of fp8_tis at condition 'kl_lo'"),
        (
            lambda d: d["matrix"]["conditions"][0].update(fp8={"noise_scale": 2.0}),
            "condition 'kl_lo' sets no fp8.target_kl",
        ),
    ],
)
def test_the_config_refuses_a_search_it_cannot_decide(tmp_path, edit, message):
    d = _config_dict(tmp_path)
    edit(d)
    if "fp8_tis_kl_lo" not in d["study"]["arms"]:
        d["study"]["planned"] = [c for c in d["study"]["planned"] if c["arm"] != "fp8_tis_kl_lo"]
    with pytest.raises(ValueError, match=message):
        ExperimentConfig.model_validate(d)


def test_the_command_decides_the_published_search_as_its_table_does(capsys):
    """`fp8rl decide failure-search` on the longform publication's own tables: exit 0 (decided), and the
    rows and decision its published failure_search.csv and SUMMARY.md carry."""
    import pandas as pd

    root = Path(__file__).resolve().parents[3]
    tables = root / "results" / "published" / "longform" / "tables"
    args = [
        "decide",
        "failure-search",
        "--config",
        str(root / "config" / "longform.yaml"),
        "--tables",
        str(tables),
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    published = pd.read_csv(tables / "failure_search.csv", keep_default_na=False, na_values=[""])
    assert [r["condition"] for r in out["rows"]] == published["condition"].tolist()
    assert [r["fails"] for r in out["rows"]] == published["fails"].tolist()
    assert f"**Decision**: {out['decision']}." in (tables.parent / "SUMMARY.md").read_text()
