"""The character-level tokenizer of scratch models, saved as a Hugging Face `PreTrainedTokenizerFast`.

Every character of the task alphabet (digits, arithmetic signs, the letters and punctuation of the
function-calling format) is one token; `<pad>`, `<bos>`, `<eos>` and `<unk>` are special tokens. The
tokenizer adds no special tokens when encoding (lm-eval's `hf` model encodes prompts without them too);
the trainer appends `<eos>` to SFT targets and the sampler stops on it. Built with the `tokenizers`
library (a `WordLevel` model over single-character pre-tokens, a `Fuse` decoder), so
`AutoTokenizer.from_pretrained(dir)` loads it with no custom code.
"""

from __future__ import annotations

import string
from pathlib import Path

from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
# Digits and signs of the arithmetic prompts, the lower-case letters and punctuation of `calc(op,a,b)`
# calls and `tool:` prompts, and a space and newline for free text.
ALPHABET = string.digits + "+-*=?:(),. \n" + string.ascii_lowercase


def build_char_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    """A fresh char tokenizer over `alphabet` (ids: the special tokens first, then the characters)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    chars = list(dict.fromkeys(alphabet))
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return as_fast_tokenizer(tok)


def as_fast_tokenizer(tok) -> PreTrainedTokenizerFast:
    """A `tokenizers.Tokenizer` over `SPECIAL_TOKENS` as the scratch models' `PreTrainedTokenizerFast`
    (left padding, no clean-up of spaces): the char tokenizer's and the longform testbed's BPE's."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


# The JSON files AutoTokenizer parses without naming them when they are broken.
TOKENIZER_JSON = ("tokenizer_config.json", "special_tokens_map.json", "config.json")


def _check_json_objects(path: Path) -> None:
    """ValueError naming the first of TOKENIZER_JSON under `path` that is not a JSON object
    (transformers raised a bare JSONDecodeError or AttributeError for a truncated or non-object file)."""
    from fp8rl.io import loads_json

    for name in TOKENIZER_JSON:
        file = path / name
        if not file.is_file():
            continue
        try:
            obj = loads_json(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{file}: not a readable JSON file ({exc})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{file}: not a JSON object (a {type(obj).__name__})")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer (any `AutoTokenizer`-loadable directory); left padding for generation and
    a pad token (the eos token when the model has none). ValueError naming a tokenizer or model file
    that is a directory (transformers would ask for sentencepiece instead) or a JSON file of it that is
    broken (`_check_json_objects`)."""
    from transformers import AutoTokenizer

    from fp8rl.checkpoint_files import not_a_file

    if (bad := not_a_file(path)) is not None:
        raise ValueError(f"{bad}: not a file (a tokenizer or model file of {path})")
    _check_json_objects(Path(path))
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """The token ids a policy is prompted with: a chat model's (one that has a chat template) prompt is
    the user turn in its chat template plus the assistant header (what lm-eval's `--apply_chat_template`
    sends too); the char tokenizer's is the bare text. No special tokens beyond the template's."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    else:
        text = prompt
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """`encode_prompt` of every prompt, in one batched call of the tokenizer (the same ids; a fast
    tokenizer encodes a batch many times faster than row by row: a training set's prompts are encoded at
    every run's start)."""
    if not prompts:
        return []
    if getattr(tokenizer, "chat_template", None):
        return [encode_prompt(tokenizer, p) for p in prompts]
    return tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
