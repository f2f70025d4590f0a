"""The subword tokenizer of the longform testbed: a byte-level BPE trained on the task corpus plus filler
text, saved as a Hugging Face `PreTrainedTokenizerFast`.

The char tokenizer (fp8rl.engine.tokenizer) has 52 symbols, all of them task symbols, so a garbled
sample there is a malformed number at worst. A real vocabulary is mostly tokens the task never uses.
This one is trained with the `tokenizers` library, as GPT-2's and Llama 3's are: a byte-level
pre-tokenizer (any text encodes, nothing is `<unk>`), digits split one per token first (as Qwen's
tokenizer does, so that numbers are spelled digit by digit; a space before a number stays with its first
digit, as a space stays with the word it precedes), then BPE merges learned up to
`vocab_size` over the training prompts and worked answers of the task plus `filler_sentences` sentences of
generated filler text (fp8rl.engine.filler). `<pad>`, `<bos>`, `<eos>`, `<unk>` are its first ids, as in
the char tokenizer; it adds no special tokens when encoding. `AutoTokenizer.from_pretrained(dir)` loads
it with no custom code.

`fp8rl data` builds it into the data directory's `tokenizer/` when `task.tokenizer` is set (the data
step of the DAG: the base models' SFT reads it there, and each base saves it beside its weights).
Deterministic: the same corpus and settings give the same `tokenizer.json` bytes (a test checks it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from fp8rl.engine.tokenizer import SPECIAL_TOKENS, as_fast_tokenizer

TOKENIZER_DIR = "tokenizer"  # under the data directory
MIN_FREQUENCY = 2  # a pair seen once is not merged


def train_bpe(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of exactly `vocab_size` tokens (special tokens included) trained on `texts`;
    ValueError when the corpus is too small to fill it (more filler text fills it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?[0-9]"), behavior="isolated"),  # one digit a token, with its space
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise ValueError(
            f"task.tokenizer.vocab_size: the corpus fills {tok.get_vocab_size()} of {vocab_size} tokens "
            "(raise task.tokenizer.filler_sentences)"
        )
    return as_fast_tokenizer(tok)


def corpus(task_rows: list[dict], filler_sentences: int, seed: int) -> list[str]:
    """The training texts: every task row's prompt and worked answer (`target`, else `answer`), then the
    filler sentences, in a fixed order."""
    from fp8rl.engine.filler import filler_sentences as filler

    texts = [f"{r['prompt']} {r.get('target', r['answer'])}" for r in task_rows]
    return texts + filler(filler_sentences, seed)


def build_bpe_tokenizer(
    task_rows: list[dict], *, vocab_size: int, filler_sentences: int, seed: int, out_dir: str | Path
) -> Path:
    """Train the testbed's tokenizer on `corpus(...)` and save it into `out_dir` (replaced atomically);
    returns `out_dir`."""
    import shutil
    import tempfile

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tok = train_bpe(corpus(task_rows, filler_sentences, seed), vocab_size)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tok.save_pretrained(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def scratch_tokenizer(tokenizer: str, data_dir: str | Path | None):
    """The tokenizer a scratch model is built with: `char` (fp8rl.engine.tokenizer) or `bpe`, the one
    `fp8rl data` trained into `data_dir`/tokenizer/ (ValueError naming the directory when it is missing)."""
    from fp8rl.engine.tokenizer import build_char_tokenizer, load_tokenizer

    if tokenizer == "char":
        return build_char_tokenizer()
    if tokenizer != "bpe":
        raise ValueError(f"models[].tokenizer: {tokenizer!r} is not a scratch tokenizer; allowed: char, bpe")
    path = Path(data_dir or ".") / TOKENIZER_DIR
    if not (path / "tokenizer.json").is_file():
        raise ValueError(f"{path}: no tokenizer.json (`fp8rl data` builds it when task.tokenizer is set)")
    return load_tokenizer(path)
