"""`fp8rl archive status` (fp8rl.run_progress): a tier's runs by state, read from which files exist, on
the corrections' comparison config with its run files written by the trainer's and the eval's own
writers. What must hold: each state is the one its files say, the arms are the study's, and nothing of
a result shows (a diverged run's summary, an eval score). The archived state is checked on a real
archive in tests/workflow/test_workflow_archive.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8rl.cli import main
from fp8rl.config_loader import load_config
from fp8rl.evaluate.schema import TaskResult, write_eval
from fp8rl.run_files import RunDir, runs_dir
from fp8rl.run_progress import describe_progress, tier_progress

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "corrections.yaml"
TIS = "grpo/story/fp8_tis/tensorwise/kl1e-2/seed{}"
SECRET = 0.123456789  # an eval score and a reward no progress line may show


def _config(tmp_path):
    return load_config(CONFIG, [f"results_dir={tmp_path}"])


def _run(cfg, seed: int, steps: int, summary: dict | None = None, scored: bool = False) -> RunDir:
    run = RunDir.of(runs_dir(cfg.results_dir, cfg.tier), TIS.format(seed))
    run.root.mkdir(parents=True)
    for step in range(1, steps + 1):
        run.append_metrics({"step": step, "reward/mean": SECRET, "entropy": 9.87654321})
    if summary is not None:
        run.write_summary(summary)
    if scored:
        write_eval(run.eval_file("heldout"), run.checkpoint, "heldout",
                   [TaskResult("heldout", "sampled_reward", SECRET, None, 512)], {})  # fmt: skip
    return run


def test_each_run_is_in_the_state_its_files_say_and_no_result_shows(tmp_path):
    cfg = _config(tmp_path)
    fresh = tier_progress(cfg, ("heldout",))
    assert fresh.counts() == {"archived": 0, "evaluated": 0, "trained": 0, "training": 0, "not started": 72}
    assert set(fresh.bases.values()) == {"not built"} and len(fresh.bases) == 8

    _run(cfg, 0, 7)
    _run(cfg, 1, 40, {"status": "diverged", "divergence": {"kind": "gibberish", "step": 40}})
    _run(cfg, 2, 300, {"status": "ok", "final_reward": SECRET}, scored=True)
    (tmp_path / cfg.tier / "base" / "story" / "seed0").mkdir(parents=True)
    (tmp_path / cfg.tier / "base" / "story" / "seed0" / "sft.json").write_text("{}")

    progress = tier_progress(cfg, ("heldout",))
    state = {r.run_id: (r.state, r.steps) for r in progress.runs}
    assert state[TIS.format(0)] == ("training", 7)
    assert state[TIS.format(1)] == ("trained", None)  # no step count: stopping early would say it diverged
    assert state[TIS.format(2)] == ("evaluated", None)
    assert {r.arm for r in progress.runs if r.run_id.startswith("grpo/story/fp8_tis/")} == {"tis"}
    assert progress.bases["story/seed0"] == "built" and progress.bases["story/seed1"] == "not built"

    text = describe_progress(progress, "config/corrections.yaml")
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines()[3:12]}
    assert lines["tis"] == ["0", "1", "1", "1", "5"]
    assert lines["bf16"] == ["0", "0", "0", "0", "8"]
    assert f"training: {TIS.format(0)}  step 7/300" in text
    assert "1 evaluated and not yet archived: fp8rl archive save --config config/corrections.yaml" in text
    shown = text + json.dumps(progress.as_json())
    for result in ("diverged", "gibberish", "0.123", "9.87", "ok"):
        assert result not in shown.replace("not started", "").replace("not built", "")


def test_the_command_prints_the_same_states_as_json(tmp_path, capsys):
    cfg = _config(tmp_path)
    _run(cfg, 3, 12)
    assert (
        main(["archive", "status", "--config", str(CONFIG), "--set", f"results_dir={tmp_path}", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["training"] == 1 and out["counts"]["not started"] == 71
    assert {
        "run_id": TIS.format(3),
        "arm": "tis",
        "base": "story/seed3",
        "state": "training",
        "steps": 12,
    } in out["runs"]


@pytest.mark.parametrize("bad", ["{", '{"format": 1, "tier": "other"}'])
def test_a_broken_archive_manifest_is_named(tmp_path, capsys, bad):
    archive = tmp_path / "published" / "archive" / "corrections"
    archive.mkdir(parents=True)
    (archive / "manifest.json").write_text(bad)
    assert main(["archive", "status", "--config", str(CONFIG), "--set", f"results_dir={tmp_path}"]) == 2
    assert f"{archive / 'manifest.json'}" in capsys.readouterr().err
