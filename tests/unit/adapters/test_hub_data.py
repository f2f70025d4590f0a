"""The paper tier's downloads and data without the hub: `fetch data|model` against a local directory
standing in for it, DAPO-Math-17k (shaped like the published parquet) -> fp8rl splits -> verl parquet,
and the config checks that refuse a task the backend cannot build."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fp8rl.adapters.hub import fetch_snapshot, read_record
from fp8rl.adapters.verl_data import write_parquet
from fp8rl.adapters.verl_run import verl_paths
from fp8rl.cli import main
from fp8rl.config.runs import RunSpec
from fp8rl.config_loader import load_config
from fp8rl.io import read_jsonl, sha256_file
from tests.hub_fixtures import DAPO, make_hub

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "config" / "paper.yaml"


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    mirror = make_hub(tmp_path / "mirror", models=("Qwen/Qwen3-8B",))
    monkeypatch.setenv("FP8RL_HUB_MIRROR", str(mirror))
    return mirror


def _sets(tmp_path: Path, *extra: str) -> list[str]:
    args = [f"hub.home={tmp_path / 'hf'}", "task.n_test=3", "task.n_train=100"]
    return [a for x in (*args, *extra) for a in ("--set", x)]


def test_fetch_model_records_revision_and_hashes_in_the_hub_cache_layout(tmp_path, hub):
    out = tmp_path / "base" / "qwen3-8b" / "model.json"
    rev = "0123456789abcdef0123456789abcdef01234567"
    data = yaml.safe_load(PAPER.read_text())
    data["models"][0]["revision"] = rev  # pinned
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump(data))
    sets = _sets(tmp_path)
    assert (
        main(["fetch", "model", "--config", str(pinned), *sets, "--model", "qwen3-8b", "--out", str(out)])
        == 0
    )
    rec = json.loads(out.read_text())
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / rev
    assert (rec["repo_id"], rec["revision"], Path(rec["path"])) == ("Qwen/Qwen3-8B", rev, snap)
    assert (snap.parent.parent / "refs" / "main").read_text() == rev  # loadable offline by hub id
    src = hub / "Qwen" / "Qwen3-8B" / "model.safetensors"
    assert rec["files"]["model.safetensors"] == {"sha256": sha256_file(src), "bytes": src.stat().st_size}
    # train finds the snapshot through the record, not the hub id
    cfg = load_config(PAPER, [f"hub.home={tmp_path / 'hf'}"])
    paths = verl_paths(cfg, RunSpec.parse("grpo/qwen3-8b/bf16/none/seed0"), tmp_path / "run", out.parent)
    assert paths.model == str(snap)


def test_fetch_model_without_a_pin_records_what_it_got_and_refuses_bad_input(tmp_path, hub, capsys):
    rec = fetch_snapshot("Qwen/Qwen3-8B", repo_type="model", revision=None, hf_home=tmp_path / "hf")
    assert rec["revision"].startswith("mirror-") and rec["revision_requested"] is None
    again = fetch_snapshot("Qwen/Qwen3-8B", repo_type="model", revision=None, hf_home=tmp_path / "hf")
    assert again["revision"] == rec["revision"]  # same files, same revision: idempotent
    out = str(tmp_path / "m.json")
    assert (
        main(
            ["fetch", "model", "--config", str(PAPER), *_sets(tmp_path), "--model", "qwen3-14b", "--out", out]
        )
        == 2
    )
    assert "Qwen/Qwen3-14B" in capsys.readouterr().err  # not in the stand-in hub: named
    assert main(["fetch", "model", "--config", str(PAPER), "--model", "nope", "--out", out]) == 2
    Path(rec["path"]).rename(tmp_path / "gone")
    Path(out).write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="snapshot .* is missing"):
        read_record(out)


def test_dapo_math_is_deduplicated_split_and_converted_for_verls_dapo_reward(tmp_path, hub):
    data = tmp_path / "data"
    sets = _sets(tmp_path)
    assert main(["fetch", "data", "--config", str(PAPER), *sets, "--out", str(data / "hub.json")]) == 0
    record = json.loads((data / "hub.json").read_text())
    assert set(record["datasets"]) == {DAPO, "openai/gsm8k", "HuggingFaceH4/MATH-500", "Maxwell-Jia/AIME_2024",
                                       "math-ai/aime25"}  # fmt: skip
    assert main(["data", "--config", str(PAPER), *sets, "--out", str(data)]) == 0
    train, test = read_jsonl(data / "train.jsonl"), read_jsonl(data / "test.jsonl")
    assert (len(train), len(test)) == (9, 3)  # 12 distinct problems of 36 rows; 3 held out
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    assert read_jsonl(data / "tool_test.jsonl") == []  # BFCL brings its own data
    info = json.loads((data / "data.json").read_text())
    assert info["source"]["repo_id"] == DAPO and info["counts"]["train.jsonl"] == 9
    row = train[0]
    n = int(row["prompt"].split("What is ")[1].split(" ")[0])
    assert row["answer"] == str(2 * n) and row["data_source"] == "math_dapo" and row["level"] == "all"
    # the same seed gives the same splits
    again = ["--out", str(tmp_path / "again"), "--hub", str(data / "hub.json")]
    assert main(["data", "--config", str(PAPER), *sets, *again]) == 0
    assert read_jsonl(tmp_path / "again" / "train.jsonl") == train

    df = pd.read_parquet(write_parquet(data / "train.jsonl", tmp_path / "t.parquet", task="dapo-math-17k",
                                       split="train"))  # fmt: skip
    v = df.iloc[0]
    assert v["data_source"] == "math_dapo"  # verl's default scorer routes it to math_dapo.compute_score
    assert v["reward_model"]["ground_truth"] == row["answer"]
    assert [dict(m) for m in v["prompt"]] == [{"role": "user", "content": row["prompt"]}]


def test_data_refuses_a_missing_record_or_a_task_the_backend_cannot_build(tmp_path, hub, capsys):
    sets = _sets(tmp_path)
    assert main(["data", "--config", str(PAPER), *sets, "--out", str(tmp_path / "d")]) == 2
    assert "hub.json: not a hub record" in capsys.readouterr().err
    for override, message in (
        ("backend=reference", "trained through verl only"),
        ("task.name=gsm8k-train", "unknown task 'gsm8k-train'"),
        ("task.levels=[add2]", "has no levels"),
    ):
        assert main(["config", "validate", str(PAPER), "--set", override]) == 2
        assert message in capsys.readouterr().err
