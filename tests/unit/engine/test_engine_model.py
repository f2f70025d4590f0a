"""Char tokenizer and the tiny Llama: Hugging Face round trips, as lm-eval's `hf` model loads them."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fp8rl.config import ArchConfig
from fp8rl.engine.model import build_model, count_parameters, save_hf
from fp8rl.engine.tokenizer import ALPHABET, build_char_tokenizer, load_tokenizer

ARCH = ArchConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def test_tokenizer_is_one_token_per_char_without_specials():
    tok = build_char_tokenizer()
    text = "tool:12+45=calc(add,12,45)"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.eos_token_id not in ids and tok.bos_token_id not in ids
    assert tok.decode([*ids, tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == text
    assert len(tok) == 4 + len(set(ALPHABET))
    assert tok("12~")["input_ids"][-1] == tok.unk_token_id


def test_tokenizer_saves_and_loads_with_autotokenizer(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    assert auto("98-7=")["input_ids"] == tok("98-7=")["input_ids"]
    assert (auto.eos_token, auto.pad_token) == ("<eos>", "<pad>")
    batch = load_tokenizer(tmp_path)(["1+2=", "10+20="], padding=True)
    assert batch["attention_mask"][0][:2] == [0, 0]  # left padding for generation


def test_model_checkpoint_loads_with_automodel(tmp_path):
    tok = build_char_tokenizer()
    model = build_model(ARCH, tok, seed=3)
    assert count_parameters(model) == count_parameters(build_model(ARCH, tok, seed=4))
    assert torch.equal(
        model.model.embed_tokens.weight, build_model(ARCH, tok, seed=3).model.embed_tokens.weight
    )
    save_hf(model, tok, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    x = tok(["12+45="], return_tensors="pt")
    assert torch.equal(loaded(**x).logits, model(**x).logits)
    assert loaded.generation_config.eos_token_id == tok.eos_token_id
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip


def test_converted_model_saves_plain_llama_weights(tmp_path):
    from fp8rl.fp8 import convert_to_fp8, get_recipe

    tok = build_char_tokenizer()
    model = build_model(ARCH, tok, seed=0)
    convert_to_fp8(model, get_recipe("delayed"))
    save_hf(model, tok, tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    ref = {k: v for k, v in model.state_dict().items()}
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, ref[k]), k


def test_a_tokenizer_file_that_is_a_directory_is_named(tmp_path):
    """transformers fell back to the slow tokenizer and asked to install sentencepiece."""
    import pytest

    from fp8rl.engine.tokenizer import build_char_tokenizer, load_tokenizer

    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.json").mkdir()
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a file"):
        load_tokenizer(tmp_path)


def test_a_broken_tokenizer_config_is_named(tmp_path):
    """A base whose tokenizer_config.json is truncated or not an object: transformers raised a bare
    JSONDecodeError ("Expecting value: line 1 column 22") or an AttributeError that named no file."""
    import pytest

    from fp8rl.engine.tokenizer import build_char_tokenizer, load_tokenizer

    build_char_tokenizer().save_pretrained(tmp_path)
    config = tmp_path / "tokenizer_config.json"
    for text, why in (('{"model_max_length": ', "not a readable JSON file"), ("[1, 2]", "not a JSON object")):
        config.write_text(text)
        with pytest.raises(ValueError, match="tokenizer_config.json: " + why):
            load_tokenizer(tmp_path)
