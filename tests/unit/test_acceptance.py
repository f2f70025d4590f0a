"""A testbed's acceptance read off its bf16 runs (fp8rl.report.acceptance, the config's `acceptance` section)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config import arm_cell
from fp8rl.config_loader import load_config
from fp8rl.report.acceptance import check_acceptance, verdict_line

ROOT = Path(__file__).resolve().parents[2]


def _heldout(path: Path, value: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"suite": "heldout", "results": [{"task": "heldout", "metric": "sampled_reward", "value": value,
                                            "stderr": 0.01, "n": 2048}]}  # fmt: skip
    path.write_text(json.dumps(doc))


def _tier(tmp_path: Path, rises, *, entropy=0.5, divergence=None, finished=True):
    """The shipped longform config's acceptance arm, one run per base seed with `rises` (None: no
    held-out score), written as the trainer and `fp8rl eval` write them; a `divergence` goes to the
    last run."""
    cfg = load_config(ROOT / "config" / "longform.yaml", [f"results_dir={tmp_path}"])
    tier = tmp_path / cfg.tier
    arm = [s for s in cfg.runs() if arm_cell(cfg.acceptance.arm, s.run_id)]
    for seed, rise in enumerate(rises):
        spec = next(s for s in arm if s.seed == seed)
        run = tier / "runs" / spec.run_id
        run.mkdir(parents=True)
        lines = [{"step": s, "entropy": entropy, "resp_len/mean": 60.0, "reward/mean": 0.3} for s in (1, 2)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        flagged = divergence if seed == len(rises) - 1 else None
        if finished:
            summary = {"run_id": spec.run_id, "status": "diverged" if flagged else "ok",
                       "reason": f"{flagged['kind']} at step {flagged['step']}" if flagged else None, "step": 2,
                       "steps_planned": 2, "final": lines[-1], "divergence": flagged}  # fmt: skip
            (run / "summary.json").write_text(json.dumps(summary))
        _heldout(tier / "base" / f"story/seed{seed}" / "eval" / "heldout.json", 0.3)
        if rise is not None:
            _heldout(run / "eval" / "heldout.json", 0.3 + rise)
    return cfg


def test_four_bases_that_learn_are_accepted(tmp_path):
    result = check_acceptance(_tier(tmp_path, [0.2, 0.25, 0.18, 0.22]))
    assert result["missed"] == []
    assert result["bases"] == 4 and result["mean_rise"] == pytest.approx(0.2125)
    assert 0 < result["interval"][0] < 0.2125 < result["interval"][1]


@pytest.mark.parametrize(
    ("kw", "rises", "missed"),
    [
        ({}, [0.2, 0.25, 0.18], r"bases with a held-out rise: 3 < acceptance.min_bases 4"),
        ({}, [0.05, 0.1, 0.12, 0.1], r"mean rise 0.09\d < acceptance.min_rise 0.15"),
        ({}, [0.9, -0.3, 0.5, -0.4], r"interval of the rise starts at -0\.\d+, not above 0"),
        ({"entropy": 0.1}, [0.2] * 4, r"seed0: entropy at step 1 0.1 < 0.3"),
        (
            {"divergence": {"kind": "gibberish", "step": 40}},
            [0.2] * 4,
            r"seed3: flagged \(gibberish at step 40\)",
        ),
        ({"finished": False}, [0.2] * 4, r"seed1: not finished"),
        ({}, [0.2, 0.2, 0.2, None], r"bases with a held-out rise: 3"),
    ],
)
def test_each_missed_criterion_is_named(tmp_path, kw, rises, missed):
    import re

    result = check_acceptance(_tier(tmp_path, rises, **kw))
    assert any(re.search(missed, m) for m in result["missed"]), result["missed"]


def test_a_pretrained_model_is_one_base_scored_under_its_own_name(tmp_path):
    """A pretrained model's base is its one checkpoint, which the DAG scores under `base/{model}/` (not
    under its source, `hf`): its score is read from there, and its runs count as one base."""
    cfg = load_config(
        ROOT / "config" / "longform.yaml",
        [f"results_dir={tmp_path}", "models=[{name: story, source: hf, hf_id: org/story}]", "study=null",
         "failure_search=null"],
    )  # fmt: skip
    tier = tmp_path / cfg.tier
    for spec in [s for s in cfg.runs() if arm_cell(cfg.acceptance.arm, s.run_id)]:
        run = tier / "runs" / spec.run_id
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "entropy": 0.5, "resp_len/mean": 60.0}) + "\n"
        )
        _heldout(run / "eval" / "heldout.json", 0.5)
    _heldout(tier / "base" / "story" / "eval" / "heldout.json", 0.3)
    result = check_acceptance(cfg)
    assert {r["base"] for r in result["runs"]} == {"story"}
    assert all(r["base_endpoint"] == 0.3 for r in result["runs"])
    assert result["bases"] == 1 and result["mean_rise"] == pytest.approx(0.2)
    assert "bases with a held-out rise: 1 < acceptance.min_bases 4" in result["missed"]


def test_a_tier_whose_control_has_not_run_says_only_that(tmp_path):
    """No bf16 run has a step yet (a study resumed on another machine): each is "not finished", with no
    entropy or length of a step that does not exist, and no mean or interval of no base."""
    cfg = _tier(tmp_path, [0.2] * 4)
    for seed in range(4):
        shutil.rmtree(Path(cfg.results_dir) / cfg.tier / "runs" / f"grpo/story/bf16/none/none/seed{seed}")
    missed = check_acceptance(cfg)["missed"]
    assert missed == ["bases with a held-out rise: 0 < acceptance.min_bases 4"] + [
        f"grpo/story/bf16/none/none/seed{seed}: not finished" for seed in range(4)
    ]


def test_the_command_exits_1_on_a_miss_and_2_without_the_section(tmp_path, capsys):
    cfg_path = tmp_path / "c.yaml"
    text = (
        (ROOT / "config" / "longform.yaml")
        .read_text()
        .replace("results_dir: results", f"results_dir: {tmp_path}")
    )
    cfg_path.write_text(text)
    assert main(["decide", "acceptance", "--config", str(cfg_path)]) == 1
    assert json.loads(capsys.readouterr().out)["bases"] == 0
    (tmp_path / "none.yaml").write_text(text.split("\nacceptance:")[0])
    assert main(["decide", "acceptance", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "acceptance: not set in this config" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kw", "rises"),
    [
        ({}, [0.2, 0.25, 0.18, 0.22]),
        ({"divergence": {"kind": "gibberish", "step": 40}}, [0.05, 0.1, 0.12, 0.1]),
    ],
)
def test_the_report_has_the_same_acceptance_as_the_command(tmp_path, kw, rises):
    """The report's `acceptance` table (built by `fp8rl report` from what it loads) gives the command's
    figures and verdict (read from the run folders)."""
    import pandas as pd

    from fp8rl.report.build import build_report
    from fp8rl.report.paths import ReportPaths

    cfg = _tier(tmp_path, rises, **kw)
    want = check_acceptance(cfg)
    build_report(cfg)
    paths = ReportPaths.for_config(cfg)
    table = pd.read_csv(paths.table("acceptance", "csv"), keep_default_na=False, na_values=[""])
    runs, last = table.iloc[:-1], table.iloc[-1]
    assert list(runs["run_id"]) == [r["run_id"] for r in want["runs"]]
    # the CSV holds 6 significant digits
    assert list(runs["rise"]) == pytest.approx([r["rise"] for r in want["runs"]], abs=1e-5)
    assert list(runs["entropy_step1"]) == pytest.approx([0.5] * 4)
    assert list(runs["resp_len_step1"]) == pytest.approx([60.0] * 4)
    assert last["run_id"] == "mean over 4 bases"
    assert (last["rise"], last["low"], last["high"]) == pytest.approx(
        (want["mean_rise"], *want["interval"]), abs=1e-5
    )
    md = paths.table("acceptance", "md").read_text()
    if want["missed"]:
        assert "**Not accepted**" in md and all(m in md for m in want["missed"])
        assert runs["flagged"].iloc[-1] == "gibberish at step 40"
    else:
        assert "**Accepted**: every criterion is met." in md
    # SUMMARY.md, read from the tables alone, says the same verdict under its own heading
    summary = paths.summary.read_text()
    assert "## Does the testbed pass its acceptance?" in summary and verdict_line(want) in summary


def test_the_published_longform_summary_gives_the_acceptance_its_table_gives():
    """The page written from the publication's tables today gives the mean rise and interval of its
    acceptance table and the verdict its acceptance.md (written by the report from the runs) gives."""
    import pandas as pd

    from fp8rl.report.summary_page import summary_page

    published = ROOT / "results" / "published" / "longform"
    manifest = json.loads((published / "report.json").read_text())
    cfg = load_config(ROOT / "config" / "longform.yaml")
    page = summary_page(
        cfg, published / "tables", manifest["control"]["comparison_void"], manifest["numerics"]
    )
    last = pd.read_csv(published / "tables" / "acceptance.csv").iloc[-1]
    section = page.split("## Does the testbed pass its acceptance?")[1].split("## ")[0]
    assert f"{last['rise']:.3f} [{last['low']:.3f}, {last['high']:.3f}]".replace("-", "−") in section
    (verdict,) = [line for line in (published / "tables" / "acceptance.md").read_text().splitlines()
                  if "ccepted**" in line]  # fmt: skip
    assert verdict.removeprefix("- ") in section and "mean rise" in section
