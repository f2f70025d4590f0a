"""Stand-ins for a rehearsal's inputs on a machine without the real ones (fp8rl.adapters.verl_rehearse,
fp8rl.adapters.rehearse_jobs): a model folder (`stand_in_model`: a character tokenizer with a ChatML
template and a config of the model's family and attention shape, no weights), a data folder (`stand_in_data`), a
finished bf16 reference run (`stand_in_reference`), and a folder standing in for the Hugging Face hub
(`stand_in_hub`, read through `$FP8RL_HUB_MIRROR` by `fp8rl fetch`): DAPO-Math-17k shaped exactly like
the published parquet, lm-eval's four paper eval sets in their hub layouts, and stand-in models under
hub ids."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

from fp8rl.adapters.verl_checkpoint import compat_tokenizer_config

# what the parallel layout depends on in each paper model's config.json on the hub: (num_attention_heads,
# num_key_value_heads, num_hidden_layers). Megatron's TP must divide the heads and the KV heads, PP the
# layers; vLLM's TP the heads.
HUB_SHAPES = {
    "Qwen/Qwen3-8B": (32, 8, 36),
    "Qwen/Qwen3-14B": (40, 8, 40),
    "Qwen/Qwen2.5-32B": (40, 8, 64),
}
STAND_IN_SHAPE = (4, 2, 2)
HEAD_DIM = 16


def model_family(hf_id: str) -> str:
    """The stand-in's `model_type` for a hub id: `qwen2` for Qwen2.5, else `qwen3`."""
    return "qwen2" if "2.5" in hf_id else "qwen3"


def stand_in_model(out: Path, model_type: str = "qwen3", shape: tuple[int, int, int] | None = None) -> Path:
    """A model directory verl's tokenizer and config loaders read: a character-level tokenizer with a
    ChatML chat template (Qwen's format) and a config of `model_type` (no weights) with `shape`'s heads,
    KV heads and layers (a real model's, `HUB_SHAPES`, so that its parallel layout is checked; default
    a two-layer one) and small widths."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {t: i for i, t in enumerate(specials + [chr(c) for c in range(32, 127)] + ["\n"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token=specials[0], chat_template=template
    )
    fast.add_special_tokens({"additional_special_tokens": specials[1:]})
    fast.save_pretrained(out)
    # as a hub snapshot has it, written by transformers 4: the special tokens as 4.x lists them, the
    # class by a name 4.x knows (transformers 5 writes its `TokenizersBackend`)
    tok_config = out / "tokenizer_config.json"
    written = compat_tokenizer_config(json.loads(tok_config.read_text()))
    tok_config.write_text(json.dumps({**written, "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))
    arch = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(model_type, "Qwen3ForCausalLM")
    heads, kv_heads, layers = shape or STAND_IN_SHAPE
    config = {"architectures": [arch], "model_type": model_type, "hidden_size": heads * HEAD_DIM,
              "intermediate_size": 128, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "head_dim": HEAD_DIM, "num_hidden_layers": layers, "vocab_size": len(vocab),
              "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
              "eos_token_id": vocab["<|im_end|>"], "pad_token_id": 0}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def stand_in_data(out: Path, n: int = 8) -> Path:
    """`train.jsonl` and `test.jsonl` of `n` problems in fp8rl's data schema (docs/interfaces.md)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [
            {"id": f"{split}-{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(n)
        ]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def stand_in_reference(out: Path) -> Path:
    """A finished bf16 run's `metrics.jsonl` with clip fractions, for a calib cell's targets."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "clip/low_neg": 0.02, "clip/high_pos": 0.01, "clip/low_all": 0.01} for s in (1, 2)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


DAPO = "BytedTsinghua-SIA/DAPO-Math-17k"
INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{q}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def dapo_rows(n_problems: int, repeats: int) -> list[dict]:
    """DAPO-Math-17k's rows as the published parquet has them (`data_source`, `prompt` as a list of
    `{content, role}` messages, `ability`, `reward_model` `{ground_truth, style}`, `extra_info`
    `{index}`), each problem repeated `repeats` times as in the published file."""
    return [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": INSTRUCTION.format(q=f"What is {i} + {i}?"), "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": str(2 * i), "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"id-{i}-{r}"},
        }
        for r in range(repeats)
        for i in range(n_problems)
    ]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _eval_sets(root: Path) -> None:
    """lm-eval's paper eval sets in their hub layouts, splits and fields (one problem each), as lm-eval's
    tasks read them (gsm8k's `main` config with a train split for its few-shot examples)."""
    q = "What is 1 + 1?"
    for split in ("train", "test"):
        _write_jsonl(
            root / "openai/gsm8k" / "main" / f"{split}.jsonl",
            [{"question": q, "answer": "1 + 1 = 2\n#### 2"}],
        )
    splits = "".join(f"  - split: {s}\n    path: main/{s}.jsonl\n" for s in ("train", "test"))
    (root / "openai/gsm8k" / "README.md").write_text(
        f"---\nconfigs:\n- config_name: main\n  data_files:\n{splits}---\n"
    )
    _write_jsonl(root / "HuggingFaceH4/MATH-500" / "test.jsonl", [{"problem": q, "solution": "$\\boxed{2}$",
                 "answer": "2", "subject": "Prealgebra", "level": 1, "unique_id": "1"}])  # fmt: skip
    _write_jsonl(
        root / "Maxwell-Jia/AIME_2024" / "train.jsonl",
        [{"ID": "1", "Problem": q, "Solution": "2", "Answer": 2}],
    )
    _write_jsonl(root / "math-ai/aime25" / "test.jsonl", [{"problem": q, "answer": "2", "id": "0"}])


def stand_in_hub(
    root: Path, *, n_problems: int = 12, repeats: int = 3, models: tuple[str, ...] = (),
    eval_sets: str = "hub", model_files: str = "stand-in",
) -> Path:  # fmt: skip
    """Write the stand-in hub under `root` (which must not exist) and return it. `eval_sets`: `hub` for
    the eval sets in their hub layouts (lm-eval builds its tasks from them), `placeholder` for a one-line
    file each (a fetch copies them; lm-eval cannot build a task from them). `models`: hub ids, each a
    `stand_in_model` of its family (`model_files: stand-in`) or a few placeholder files (`placeholder`)."""
    import pandas as pd

    from fp8rl.adapters.hub import EVAL_DATASETS

    data = root / DAPO / "data"
    data.mkdir(parents=True)
    pd.DataFrame(dapo_rows(n_problems, repeats)).to_parquet(data / "dapo-math-17k.parquet", index=False)
    (root / DAPO / "README.md").write_text("DAPO-Math-17k stand-in\n")
    if eval_sets == "hub":
        _eval_sets(root)
    else:
        for repo in EVAL_DATASETS.values():
            (root / repo).mkdir(parents=True)
            (root / repo / "test.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    for hf_id in models:
        if model_files == "stand-in":
            stand_in_model(root / hf_id, model_family(hf_id), HUB_SHAPES.get(hf_id))
            (root / hf_id / "model.safetensors").write_bytes(b"")
            continue
        (root / hf_id).mkdir(parents=True)
        (root / hf_id / "config.json").write_text('{"model_type": "qwen3"}\n')
        (root / hf_id / "model.safetensors").write_bytes(b"\0" * 64 + hf_id.encode())
        (root / hf_id / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}\n')
    return root


def stand_in_checkpoint(out: Path, base: Path) -> Path:
    """An exported checkpoint folder as the evaluations read it: `base`'s config and tokenizer files (not
    its weights) and an empty `model.safetensors` (the evaluations stop before they load weights)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(base).iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin", ".pt"):
            shutil.copyfile(f, out / f.name)
    (out / "model.safetensors").write_bytes(b"")
    return out


def write_verl_file_log(path: Path, rows: dict[int, dict], project: str = "fp8rl") -> None:
    """`rows` (step -> metrics) written by verl's own `FileLogger` (`trainer.logger: [file]`, orjson:
    NaN as null) to `path`, given as the job script gives it (`VERL_FILE_LOGGER_PATH`, restored after)."""
    from verl.utils.tracking import FileLogger

    path.parent.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its "Creating file logger at" line
            logger = FileLogger(project, "run")
        for step, data in rows.items():
            logger.log(data=data, step=step)
        logger.finish()
    finally:
        if previous is None:
            os.environ.pop("VERL_FILE_LOGGER_PATH")
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = previous
