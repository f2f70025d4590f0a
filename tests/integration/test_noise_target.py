"""`fp8.target_kl` (fp8rl.engine.noise_target): the run finds the noise scale whose trainer-vs-rollout
KL at its base is the target, trains at it, records it, and a resumed run reads it back."""

from __future__ import annotations

import json

import pytest

from fp8rl.config import resolve_run
from fp8rl.config.runs import find_run
from fp8rl.config_loader import ConfigError, load_config
from fp8rl.engine import noise_target
from fp8rl.engine.model import load_hf
from fp8rl.engine.noise_target import TOLERANCE, _next_scale, measure
from fp8rl.engine.tokenizer import load_tokenizer

RUN = "grpo/tiny/fp8/tensorwise/seed0"


def test_next_scale_steps_and_interpolates():
    assert _next_scale(1.0, 4e-3, 1e-3, None, None) == pytest.approx(0.5)  # KL ∝ s²
    assert _next_scale(1.0, 1e-9, 1e-3, None, None) == 8.0  # at most ×8 a step
    # inside a bracket: exact on a power law KL = c s²
    lo, hi = (0.5, 0.25e-3), (2.0, 4e-3)
    assert _next_scale(2.0, 4e-3, 1e-3, lo, hi) == pytest.approx(1.0)
    assert _next_scale(64.0, 1e-9, 1e-3, None, None) == 64.0  # never past the scale's bound


def test_target_kl_excludes_a_given_scale(tier, tmp_path):
    _, _, write_config = tier
    with pytest.raises(ConfigError, match="target_kl sets the noise scale"):
        load_config(write_config(tmp_path / "c.yaml", {"fp8.target_kl": 1e-3, "fp8.noise_scale": 2.0}))


@pytest.mark.slow
def test_run_trains_at_the_scale_that_reaches_its_target(
    tier, train, tmp_path, restore_torch_globals, monkeypatch
):
    root, _, write_config = tier
    target = 2e-3
    out = tmp_path / "run"
    trainer, summary, rows = train(RUN, out, {"fp8.target_kl": target, "schedule.steps": 2})
    assert summary["status"] == "ok"
    found = json.loads((out / "noise.json").read_text())
    assert summary["noise"]["noise_scale"] == found["noise_scale"] == trainer.resolved.noise_scale
    assert abs(found["units"]["mismatch/kl_k3"] - target) <= TOLERANCE * target
    assert found["tried"][0]["scale"] == 1.0 and found["noise_scale"] != 1.0
    # what the search measured is the run's own setup at that scale, recomputed here
    cfg = load_config(write_config(tmp_path / "c.yaml", {"fp8.target_kl": target}))
    run = resolve_run(cfg, find_run(cfg, RUN)).with_noise_scale(found["noise_scale"])
    rows_test = [json.loads(x) for x in (root / "data" / "test.jsonl").read_text().splitlines()]
    again = measure(cfg, run, load_hf(root / "base" / "tiny"), load_tokenizer(root / "base" / "tiny"),
                    rows_test[: noise_target.PROMPTS])  # fmt: skip
    assert again == found["units"]
    # the trainer's own step-1 mismatch is of the target's order (the search's prompts are held out)
    assert 0.2 * target < rows[0]["mismatch/kl_k3"] < 5 * target

    # a resumed or rerun run with the same digest reads noise.json back: no second search
    def refuse(*a, **k):
        raise AssertionError("searched again")

    monkeypatch.setattr(noise_target, "find_noise_scale", refuse)
    trainer2, summary2, _ = train(RUN, out, {"fp8.target_kl": target, "schedule.steps": 2})
    assert summary2["noise"] == summary["noise"]


@pytest.mark.slow
def test_unreachable_target_fails_with_its_reason(tier, train, tmp_path, restore_torch_globals):
    """A target below the mismatch the recipe has even at the smallest scale is refused, naming it."""
    with pytest.raises(
        ValueError, match=r"fp8.target_kl 1e-12 is below what this recipe reaches: noise scale 0.015625"
    ):
        train(RUN, tmp_path / "run", {"fp8.target_kl": 1e-12, "schedule.steps": 1})
    assert not (tmp_path / "run" / "noise.json").exists()


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_runs_of_one_base_and_setting_share_one_search(
    tier, train, tmp_path, restore_torch_globals, monkeypatch
):
    """In the DAG's layout the first run's search is the tier's (`{tier}/noise/{key}.json`); FP8 + TIS of
    the same base and setting reads it instead of searching, and trains the same bits as the same run
    that searched itself; another granularity has another key."""
    root, _, write_config = tier
    settings = {"fp8.target_kl": 2e-3, "schedule.steps": 2}
    runs, tis = tmp_path / "tier" / "runs", "grpo/tiny/fp8_tis/tensorwise/seed0"
    for run_id in (RUN, tis):
        (runs / run_id).parent.mkdir(parents=True)  # where `train` writes each run's config
    _, first, _ = train(RUN, runs / RUN, settings)
    shared = sorted((tmp_path / "tier" / "noise").iterdir())
    assert [p.suffix for p in shared] == [".json"]  # the search, and no lock file left behind
    assert json.loads(shared[0].read_text())["noise_scale"] == first["noise"]["noise_scale"]

    def refuse(*a, **k):
        raise AssertionError("searched again")

    with monkeypatch.context() as m:
        m.setattr(noise_target, "find_noise_scale", refuse)
        _, shared_tis, shared_rows = train(tis, runs / tis, settings)
    assert shared_tis["noise"] == first["noise"]
    _, alone, alone_rows = train(tis, tmp_path / "alone", settings)  # outside the layout: its own search
    assert alone["noise"] == shared_tis["noise"]
    assert _untimed(alone_rows) == _untimed(shared_rows)

    cfg = load_config(write_config(tmp_path / "c.yaml", settings))
    base, data = root / "base" / "tiny", root / "data"
    keys = {r: noise_target.shared_key(resolve_run(cfg, find_run(cfg, r)), base, data)
            for r in (RUN, tis, "grpo/tiny/fp8/blockwise/seed0")}  # fmt: skip
    assert keys[RUN] == keys[tis] != keys["grpo/tiny/fp8/blockwise/seed0"]
    assert noise_target.shared_dir(resolve_run(cfg, find_run(cfg, RUN)), tmp_path / "alone") is None
