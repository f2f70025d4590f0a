"""Inputs checked before any work (fp8rl.engine.inputs): a base model that is not the config's, or a data
row that is malformed or longer than the model's positions, stops `fp8rl train` / `fp8rl sft` with exit 2
naming the file (and line), before anything is loaded or written."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

RUN_ID = "grpo/tiny/bf16/none/seed0"


def _train_args(tier, config: Path, out: Path, base: Path, data: Path) -> list[str]:
    return ["train", "--config", str(config), "--run", RUN_ID, "--base", str(base), "--data", str(data),
            "--out", str(out), "--no-progress"]  # fmt: skip


def _main(args: list[str], capsys) -> tuple[int, str]:
    from fp8rl.cli import main

    code = main(args)
    return code, capsys.readouterr().err


def _edit_config(base: Path, **changes) -> None:
    path = base / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def _truncate(base: Path) -> None:
    path = base / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size - 100])


BASE_DAMAGE = [
    (lambda b: _edit_config(b, num_hidden_layers=100000), "num_hidden_layers is 100000, but models[tiny].arch.num_layers makes it 2"),
    (lambda b: _edit_config(b, hidden_size=96), "hidden_size is 96, but models[tiny].arch.hidden_size makes it 64"),
    (lambda b: _edit_config(b, vocab_size=7), "vocab_size is 7, but the char tokenizer makes it"),
    (_truncate, "model.safetensors: truncated ("),
    (lambda b: (b / "config.json").write_text("[1, 2"), "config.json: unreadable"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("damage", "says"), BASE_DAMAGE, ids=["layers", "hidden", "vocab", "truncated", "json"]
)
def test_a_base_model_that_is_not_the_configs_exits_2_before_any_work(tier, tmp_path, capsys, damage, says):
    root, config, _ = tier
    base = tmp_path / "base"
    shutil.copytree(root / "base" / "tiny", base)
    damage(base)
    start = time.monotonic()
    code, err = _main(_train_args(tier, config, tmp_path / "out", base, root / "data"), capsys)
    assert code == 2, err
    assert says in err and "Traceback" not in err
    assert time.monotonic() - start < 30 and not (tmp_path / "out").exists()


def _rows(root: Path) -> list[str]:
    return (root / "data" / "train.jsonl").read_text().splitlines(keepends=True)


DATA_DAMAGE = [
    (lambda rows: rows[:2] + [json.dumps({"id": "x", "prompt": "1+1="}) + "\n"] + rows[2:], "train.jsonl:3: no 'answer' field"),
    (lambda rows: rows[:1] + ["[1, 2]\n"] + rows[1:], "train.jsonl:2: a row must be a JSON object, not list"),
    (lambda rows: rows[:3] + [json.dumps({"id": "x", "prompt": "1+1=", "answer": 2}) + "\n"], "train.jsonl:4: 'answer' must be a string, not int"),
    (lambda rows: rows[:1] + [b'{"id": "x", "prompt": "\xff"}\n'] + rows[1:], "train.jsonl:2: not UTF-8 text"),
    (lambda rows: rows + [json.dumps({"id": "x", "prompt": "1+" * 400_000 + "1=", "answer": "2"}) + "\n"],
     "the prompt plus schedule.max_new_tokens (3) is 800005 tokens, more than the model's 32 positions"),
]  # fmt: skip


def _write_data(root: Path, tmp_path: Path, damage) -> Path:
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    lines = damage(_rows(root))
    (data / "train.jsonl").write_bytes(b"".join(x if isinstance(x, bytes) else x.encode() for x in lines))
    return data


@pytest.mark.parametrize(
    ("damage", "says"), DATA_DAMAGE, ids=["no-answer", "list", "int-answer", "utf8", "huge"]
)
def test_a_bad_data_row_stops_train_and_sft_naming_file_and_line(tier, tmp_path, capsys, damage, says):
    root, config, _ = tier
    data = _write_data(root, tmp_path, damage)
    code, err = _main(_train_args(tier, config, tmp_path / "out", root / "base" / "tiny", data), capsys)
    assert code == 2, err
    assert f"{data / 'train.jsonl'}:" in err and says.split(": ", 1)[-1] in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    sft = [
        "sft",
        "--config",
        str(config),
        "--model",
        "tiny",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "b"),
    ]
    code, err = _main(sft, capsys)
    assert code == 2, err
    assert f"{data / 'train.jsonl'}:" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()


def test_check_base_accepts_the_tiers_base_and_a_pretrained_one_as_recorded(tier, tmp_path):
    from fp8rl.config_loader import load_config
    from fp8rl.engine.inputs import check_base
    from fp8rl.engine.model import count_parameters, load_hf, save_hf
    from fp8rl.engine.tokenizer import load_tokenizer

    root, _, write_config = tier
    base = root / "base" / "tiny"
    cfg = load_config(write_config(tmp_path / "c.yaml", {}))
    assert check_base(cfg, "tiny", base)["num_hidden_layers"] == 2
    # a pretrained model: checked against what `fp8rl model` recorded in base.json
    data = json.loads(json.dumps(cfg.model_dump(mode="json")))
    data["models"].append({"name": "pre", "source": "hf", "hf_id": "org/pre"})
    cfg = load_config(write_config(tmp_path / "p.yaml", {"models": data["models"]}))
    model = load_hf(base)
    info = {"architecture": type(model).__name__, "parameters": count_parameters(model)}
    pre = tmp_path / "pre"
    save_hf(model, load_tokenizer(base), pre, extra={"base.json": json.dumps(info).encode()})
    check_base(cfg, "pre", pre)
    (pre / "base.json").write_text(json.dumps(info | {"parameters": info["parameters"] + 1}))
    with pytest.raises(ValueError, match=r"describes \d+ parameters, but base.json recorded"):
        check_base(cfg, "pre", pre)
    (pre / "base.json").write_text(json.dumps(info))
    _edit_config(pre, intermediate_size=256)  # config.json no longer the recorded model
    with pytest.raises(ValueError, match=r"describes 138048 parameters, but base.json recorded 88896"):
        check_base(cfg, "pre", pre)
    (pre / "base.json").write_text(json.dumps(info | {"parameters": 138048}))  # base.json tampered too
    with pytest.raises(
        ValueError, match=r"weight 'model.layers.0.mlp.gate_proj.weight' has shape \[128, 64\]"
    ):
        check_base(cfg, "pre", pre)
