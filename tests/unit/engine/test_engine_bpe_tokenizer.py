"""The longform testbed's subword tokenizer (fp8rl.engine.bpe_tokenizer): a real vocabulary, loadable by
`AutoTokenizer`, deterministic, built by `fp8rl data` from the config's `task.tokenizer`."""

from __future__ import annotations

from pathlib import Path

import pytest

from fp8rl.engine import longform
from fp8rl.engine.bpe_tokenizer import (
    TOKENIZER_DIR,
    build_bpe_tokenizer,
    corpus,
    scratch_tokenizer,
    train_bpe,
)
from fp8rl.engine.tokenizer import SPECIAL_TOKENS, build_char_tokenizer, load_tokenizer

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rows():
    return longform.generate_split(["events2"], 2000, 1234, split="train")


@pytest.fixture(scope="module")
def built(tmp_path_factory, rows):
    out = tmp_path_factory.mktemp("tok") / TOKENIZER_DIR
    build_bpe_tokenizer(rows, vocab_size=4096, filler_sentences=20_000, seed=1234, out_dir=out)
    return out


def test_the_tokenizer_has_a_real_vocabulary_and_loads_with_auto_tokenizer(built, rows):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(built))
    assert len(tok) == 4096
    assert tok.convert_ids_to_tokens(list(range(4))) == list(SPECIAL_TOKENS)
    assert (tok.pad_token, tok.eos_token) == ("<pad>", "<eos>")
    text = rows[0]["prompt"] + " " + rows[0]["target"]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.eos_token_id not in ids and tok.decode(ids) == text  # byte-level: a lossless round trip
    # digits one per token (numbers spelled digit by digit), words whole
    assert tok.tokenize(" has 47 apples") == ["Ġhas", "Ġ4", "7", "Ġapples"]
    # most of the vocabulary is never used by the task: a sampled token can be nonsense
    used = {
        i for r in rows for i in tok(r["prompt"] + " " + r["target"], add_special_tokens=False)["input_ids"]
    }
    assert len(used) < len(tok) // 8


def test_same_corpus_same_vocabulary_bytes(tmp_path, built, rows):
    again = tmp_path / "again"
    build_bpe_tokenizer(rows, vocab_size=4096, filler_sentences=20_000, seed=1234, out_dir=again)
    assert (again / "tokenizer.json").read_bytes() == (built / "tokenizer.json").read_bytes()
    other = train_bpe(corpus(rows, 20_000, seed=99), 4096)  # other filler: another vocabulary
    assert other.backend_tokenizer.to_str() != (built / "tokenizer.json").read_text()


def test_a_corpus_too_small_for_the_vocabulary_names_the_key(rows):
    with pytest.raises(
        ValueError, match=r"task\.tokenizer\.vocab_size: .*raise task\.tokenizer\.filler_sentences"
    ):
        train_bpe(corpus(rows[:20], 0, seed=1), 4096)


def test_scratch_tokenizer_picks_char_or_the_data_steps_bpe(tmp_path, built):
    assert len(scratch_tokenizer("char", None)) == len(build_char_tokenizer())
    assert len(scratch_tokenizer("bpe", built.parent)) == 4096
    with pytest.raises(ValueError, match=r"tokenizer: no tokenizer.json .*fp8rl data"):
        scratch_tokenizer("bpe", tmp_path)
    with pytest.raises(ValueError, match=r"models\[\]\.tokenizer: 'gpt2' .*allowed: char, bpe"):
        scratch_tokenizer("gpt2", tmp_path)


def test_the_data_step_builds_it_from_the_tier_config(tmp_path):
    from fp8rl.config_loader import load_config
    from fp8rl.engine.data import write_data

    cfg = load_config(ROOT / "config" / "longform.yaml")
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"n_train": 1500, "n_test": 50})})
    info = write_data(cfg, tmp_path)
    assert info["tokenizer"] == {"dir": TOKENIZER_DIR, "vocab_size": cfg.task.tokenizer.vocab_size}
    assert len(load_tokenizer(tmp_path / TOKENIZER_DIR)) == cfg.task.tokenizer.vocab_size >= 4096
    assert not (tmp_path / "tool_train.jsonl").exists()  # the longform SFT learns the task alone
    from fp8rl.engine.inputs import check_sft_data

    check_sft_data(cfg, "story", tmp_path)  # every SFT example fits the model's positions in these tokens


def test_a_bpe_model_without_task_tokenizer_is_refused_naming_the_key(tmp_path):
    from fp8rl.config_loader import ConfigError, load_config
    from fp8rl.engine.tasks import config_problems

    text = (ROOT / "config" / "longform.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("  tokenizer: {vocab_size: 4096, filler_sentences: 20000}\n", ""))
    with pytest.raises(ConfigError, match=r"models.0.tokenizer.*bpe needs task\.tokenizer"):
        load_config(path, checks=[config_problems])
