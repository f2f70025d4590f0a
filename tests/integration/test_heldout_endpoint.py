"""The held-out bf16 endpoint (`fp8rl eval heldout`, fp8rl.engine.heldout) and the checkpoint history
(`schedule.keep_every`) on the tiny tier: prompts disjoint from every split, the bf16 sampler whatever
the run's variant, the same numbers for the same checkpoint, and the endpoints.csv columns built from them."""

from __future__ import annotations

import json
import math

import pytest

from fp8rl.cli import main
from fp8rl.config_loader import load_config
from fp8rl.engine.data import load_split
from fp8rl.engine.heldout import heldout_rows, score_checkpoint

# one-digit additions have 100 problems, 90 of them in train and test: 8 are left for the held-out split
HELDOUT = {"eval.heldout": {"prompts": 8, "samples": 3}}


def test_heldout_prompts_are_new_and_fixed(tier, tmp_path):
    root, _, write_config = tier
    cfg = load_config(write_config(tmp_path / "c.yaml", HELDOUT))
    rows = heldout_rows(cfg, root / "data")
    assert len(rows) == 8 and len({r["prompt"] for r in rows}) == 8
    taken = {r["prompt"] for s in ("train.jsonl", "test.jsonl") for r in load_split(root / "data", s)}
    assert not taken & {r["prompt"] for r in rows}
    assert heldout_rows(cfg, root / "data") == rows  # drawn from the task seed: the same every time


def test_heldout_refuses_what_it_cannot_draw(tier, tmp_path):
    root, _, write_config = tier
    cfg = load_config(write_config(tmp_path / "c.yaml", {"eval.heldout": {"prompts": 5000}}))
    with pytest.raises(ValueError, match="eval.heldout.prompts: 5000 prompts"):
        heldout_rows(cfg, root / "data")  # one-digit additions have 100 problems in all
    with pytest.raises(Exception, match="eval.heldout"):
        load_config(write_config(tmp_path / "g.yaml", {**HELDOUT, "task.name": "gsm8k"}))


@pytest.mark.slow
def test_heldout_cli_scores_history_and_endpoints(tier, train, tmp_path, restore_torch_globals, capsys):
    root, _, write_config = tier
    out = tmp_path / "runs" / "grpo" / "tiny" / "fp8" / "tensorwise" / "seed0"
    out.parent.mkdir(parents=True)
    overrides = {**HELDOUT, "schedule.keep_every": 1}
    trainer, summary, _ = train("grpo/tiny/fp8/tensorwise/seed0", out, overrides)
    assert summary["status"] == "ok"
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step00001", "step00002", "step00003"]
    # the last kept weights are the final checkpoint's
    assert (out / "checkpoints/step00003/model.safetensors").read_bytes() == (
        out / "checkpoint/model.safetensors"
    ).read_bytes()
    config = write_config(tmp_path / "c.yaml", HELDOUT)
    cfg = load_config(config)
    args = ["eval", "heldout", "--config", str(config), "--data", str(root / "data")]
    assert (
        main([*args, "--checkpoint", str(out / "checkpoint"), "--out", str(out / "eval/heldout.json")]) == 0
    )
    base_out = tmp_path / "base" / "tiny" / "eval" / "heldout.json"  # beside the runs, as the DAG writes it
    assert main([*args, "--checkpoint", str(root / "base" / "tiny"), "--out", str(base_out)]) == 0
    doc = json.loads((out / "eval/heldout.json").read_text())
    scores = {r["metric"]: r for r in doc["results"]}
    assert set(scores) == {"greedy_acc", "sampled_reward", "sampled_format"}
    assert all(0 <= r["value"] <= 1 and r["n"] == 8 for r in scores.values())
    assert doc["provenance"]["eval"]["sampler"] == "bf16-emulated"
    # the bf16 sampler: the FP8 run's checkpoint scores as the same weights would in a bf16 model
    again = {
        s.metric: s.value for s in score_checkpoint(cfg, out / "checkpoint", heldout_rows(cfg, root / "data"))
    }
    assert again == {m: r["value"] for m, r in scores.items()}
    # a mid-run checkpoint of the history scores too
    mid = tmp_path / "mid.json"
    assert main([*args, "--checkpoint", str(out / "checkpoints/step00001"), "--out", str(mid)]) == 0

    from fp8rl.config.runs import find_run
    from fp8rl.report.endpoints import HELDOUT_COLUMNS, base_heldout, endpoints_table
    from fp8rl.report.load import load_tier

    spec = find_run(cfg, "grpo/tiny/fp8/tensorwise/seed0")
    base = base_heldout(tmp_path / "runs", cfg, spec)
    base_doc = {r["metric"]: r["value"] for r in json.loads(base_out.read_text())["results"]}
    assert base == base_doc
    runset = load_tier(cfg, tmp_path / "runs")
    table = endpoints_table(runset, cfg, tmp_path / "runs").set_index("run_id")
    row = table.loc["grpo/tiny/fp8/tensorwise/seed0"]
    for metric, r in scores.items():
        assert row[f"heldout/{metric}"] == r["value"]
        assert row[f"base_heldout_{metric}"] == base_doc[metric]
        assert row[f"heldout_gain_{metric}"] == pytest.approx(r["value"] - base_doc[metric])
    assert all(
        math.isnan(table.loc[r, c]) for r in table.index if r != spec.run_id for c in HELDOUT_COLUMNS[3:]
    )
    for unit in ("kl_k3", "abs_dlogp", "tmpe", "dlogp"):
        for window in ("", "_first", "_last"):
            assert math.isfinite(row[f"shadow_mismatch_{unit}{window}"])
            assert math.isfinite(row[f"mismatch_{unit}{window}"])
    assert row["mismatch_tmpe"] >= 1 and row["mismatch_abs_dlogp"] > 0

    # the mismatch calibration table: the setting's means of those columns, against a real stack's KL
    from fp8rl.report.mismatch_table import mismatch_table
    from fp8rl.vocabulary import REAL_BF16_KL

    calib = mismatch_table(table.reset_index(), cfg)
    assert len(calib) == 1  # the one run that trained
    c = calib.iloc[0]
    assert (c["variant"], c["granularity"], c["format"], c["runs"]) == ("fp8", "tensorwise", "hybrid", 1)
    assert (
        c["mismatch_kl_k3"] == row["mismatch_kl_k3"]
        and c["shadow_mismatch_tmpe"] == row["shadow_mismatch_tmpe"]
    )
    assert c["kl_x_real_bf16"] == pytest.approx(row["mismatch_kl_k3"] / REAL_BF16_KL)
    growth = row["shadow_mismatch_abs_dlogp_last"] / row["shadow_mismatch_abs_dlogp_first"]
    assert c["shadow_mismatch_abs_dlogp_growth"] == pytest.approx(growth)

    # a study may name the held-out endpoint as its own: one value per run, its final checkpoint's
    from fp8rl.report.endpoints import endpoints_table

    study = {"arms": {"bf16": "grpo/tiny/bf16/none", "fp8": "grpo/tiny/fp8/tensorwise"},
             "endpoint": {"metric": "heldout/sampled_reward"}, "min_effect": 0.1, "planning_sd": 0.1,
             "min_seeds": 2, "planned": [{"name": "fp8_vs_bf16", "arm": "fp8", "reference": "bf16"}]}  # fmt: skip
    scfg = load_config(write_config(tmp_path / "s.yaml", {**HELDOUT, "study": study}))
    ends = endpoints_table(load_tier(scfg, tmp_path / "runs"), scfg, tmp_path / "runs").set_index("run_id")
    assert ends.loc[spec.run_id, "endpoint"] == scores["sampled_reward"]["value"]
    with pytest.raises(Exception, match="held-out endpoint: it needs eval.heldout"):
        load_config(write_config(tmp_path / "t.yaml", {"study": study}))

    # the history suite scores every kept checkpoint as `fp8rl eval heldout` scores one: step 1 as the
    # mid-run score above, step 3 (the final weights) as the final checkpoint's
    kept_cfg = write_config(tmp_path / "k.yaml", {**HELDOUT, "schedule.keep_every": 1})
    hist_out = out / "eval" / "heldout_history.json"
    history_args = ["eval", "heldout-history", "--config", str(kept_cfg), "--data", str(root / "data")]
    assert main([*history_args, "--checkpoint", str(out / "checkpoint"), "--out", str(hist_out)]) == 0
    history = json.loads(hist_out.read_text())
    assert history["suite"] == "heldout_history" and history["results"] == []
    assert [e["step"] for e in history["history"]] == [1, 2, 3]
    by_step = {e["step"]: {r["metric"]: r["value"] for r in e["results"]} for e in history["history"]}
    assert by_step[1] == {r["metric"]: r["value"] for r in json.loads(mid.read_text())["results"]}
    assert by_step[3] == {m: r["value"] for m, r in scores.items()}
    assert "heldout step 1" in capsys.readouterr().out
    # without keep_every the suite refuses before loading a model
    assert main([*history_args[:3], str(config), *history_args[4:], "--checkpoint", str(out / "checkpoint"),
                 "--out", str(tmp_path / "no.json")]) == 2  # fmt: skip
    assert not (tmp_path / "no.json").exists()

    # the report's curve for the run: its base at step 0, then each kept step (the last one the final's)
    from fp8rl.report.heldout_curve import curve_points

    kcfg = load_config(kept_cfg)
    ends = endpoints_table(load_tier(kcfg, tmp_path / "runs"), kcfg, tmp_path / "runs")
    points, problems = curve_points(ends, kcfg, tmp_path / "runs")
    assert problems == []
    mine = points[points["run_id"] == spec.run_id]
    assert list(mine["step"]) == [0, 1, 2, 3]
    assert list(mine["value"]) == [
        base_doc["sampled_reward"],
        *(by_step[s]["sampled_reward"] for s in (1, 2, 3)),
    ]
