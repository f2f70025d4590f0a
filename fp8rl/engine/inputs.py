"""Inputs checked before any work: the base model against the config, the data rows against the model.

`fp8rl train` and `fp8rl sft` call these before they lock, load or write anything; each raises
ValueError naming the file (and line, or key) and the command exits 2.

- `check_base(cfg, model, base_dir)`: the base model directory is the model the config describes,
  read from its files' headers, never by loading the weights: `config.json` must be a JSON object of
  the config's architecture (a scratch model: every size of `models[].arch` and its tokenizer's
  vocabulary, the char tokenizer's or `task.tokenizer.vocab_size`; a pretrained one: the architecture
  and parameter count its `base.json` recorded when
  `fp8rl model` wrote it), and the safetensors weights must hold a tensor of the right shape for every
  weight of that architecture, each whole (a truncated file is named). The layer count is checked
  against the weights before the model is built on the meta device, so a tampered `num_hidden_layers`
  costs nothing. Returns `config.json`.
- `check_train_data(cfg, base_dir, data_dir, config)`: every row of `train.jsonl` (fields and types:
  fp8rl.engine.data.row_problem), and its prompt, in the base model's tokenizer and chat template, plus
  `schedule.max_new_tokens` within the model's positions.
- `check_base_seed(cfg, spec, base_dir)`: a scratch base's `sft.json` records the base seed the run
  starts from (`sft.base_seed`: a per-seed base, or the shared one), so a run never trains from
  another seed's base. Returns the base's record for the run's summary.
- `check_sft_data(cfg, model, data_dir)`: the splits `fp8rl sft` reads, and every SFT example (prompt,
  target, `<eos>`) and test prompt plus `schedule.max_new_tokens` within `models[].arch`'s positions.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

from fp8rl.config import ExperimentConfig, RunSpec
from fp8rl.engine.data import length_problem, load_split_lines

BASE_INFO = "base.json"  # written by `fp8rl model` (fp8rl.engine.pretrained)
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# safetensors dtype -> bytes per element
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
               "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}  # fmt: skip
# config.json keys of a scratch model and the `models[].arch` key each must equal
ARCH_KEYS = {
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
}
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _json_object(path: Path, what: str) -> dict:
    try:
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing; not {what}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({exc}); not {what}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a JSON object; not {what}")
    return obj


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """`{tensor name: (dtype, shape)}` from a safetensors file's header; ValueError naming the file when
    it is not one, or is shorter than its header says (truncated), or a tensor's bytes do not fit its
    shape."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: truncated ({size} bytes): not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 << 20):
            raise ValueError(
                f"{path}: header of {n} bytes in a {size}-byte file: truncated or not safetensors"
            )
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: unreadable safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: unreadable safetensors header (not an object)")
    out, end = {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, stop) = t["dtype"], tuple(int(d) for d in t["shape"]), t["data_offsets"]
            need = math.prod(shape) * DTYPE_BYTES[dtype]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name!r}: unreadable entry in the header") from None
        if stop - begin != need:
            raise ValueError(f"{path}: tensor {name!r}: {stop - begin} bytes for shape {list(shape)} {dtype}")
        out[name], end = (dtype, shape), max(end, stop)
    if size < 8 + n + end:
        raise ValueError(f"{path}: truncated ({size} bytes, its header says {8 + n + end})")
    return out


def weight_shapes(base: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape over the base directory's safetensors file(s) (one file, or the shards of an
    index); ValueError naming what is missing or damaged."""
    if (base / WEIGHTS_INDEX).is_file():
        index = _json_object(base / WEIGHTS_INDEX, "a safetensors index")
        files = sorted(set((index.get("weight_map") or {}).values()))
        if not files or not all(isinstance(f, str) and "/" not in f for f in files):
            raise ValueError(f"{base / WEIGHTS_INDEX}: no usable weight_map")
    elif (base / WEIGHTS).is_file():
        files = [WEIGHTS]
    else:
        raise ValueError(
            f"{base}: no {WEIGHTS} (not a base model directory written by `fp8rl sft` or `fp8rl model`)"
        )
    shapes = {}
    for f in files:
        if not (base / f).is_file():
            raise ValueError(f"{base / f}: missing (named by {WEIGHTS_INDEX})")
        shapes |= {k: shape for k, (_, shape) in safetensors_header(base / f).items()}
    return shapes


def _scratch_problems(cfg: ExperimentConfig, model: str, config: dict, base: Path) -> list[str]:
    from fp8rl.engine.tokenizer import build_char_tokenizer

    arch = cfg.model(model).arch
    where = f"{base / 'config.json'}"
    expected = {k: getattr(arch, a) for k, a in ARCH_KEYS.items()}
    expected["num_key_value_heads"] = arch.num_kv_heads or arch.num_heads
    bpe = cfg.model(model).tokenizer == "bpe" and cfg.task.tokenizer is not None
    expected["vocab_size"] = cfg.task.tokenizer.vocab_size if bpe else len(build_char_tokenizer())
    out = []
    for key, want in expected.items():
        if config.get(key) != want:
            src = (
                f"models[{model}].arch.{ARCH_KEYS[key]}"
                if key in ARCH_KEYS
                else ("task.tokenizer.vocab_size" if bpe else "the char tokenizer")
            )
            src = "models[].arch.num_kv_heads" if key == "num_key_value_heads" else src
            out.append(f"{where}: {key} is {config.get(key)!r}, but {src} makes it {want}")
    if config.get("model_type") != "llama":
        out.append(f"{where}: model_type {config.get('model_type')!r}; a scratch model is 'llama'")
    return out


def check_base(cfg: ExperimentConfig, model: str, base_dir: str | Path) -> dict:
    """Check the base model directory against the config before anything is loaded (module docstring);
    returns its `config.json`. ValueError naming the file and what differs."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    base = Path(base_dir)
    mcfg = cfg.model(model)
    config = _json_object(base / "config.json", "a model's config.json")
    if mcfg.source == "scratch":
        if problems := _scratch_problems(cfg, model, config, base):
            raise ValueError(problems[0] + " (a base model of another config, or a tampered file)")
        expected_params = None
    else:
        info = _json_object(base / BASE_INFO, f"a base written by `fp8rl model` for {model!r}")
        arch = (config.get("architectures") or [None])[0]
        if arch != info.get("architecture"):
            raise ValueError(
                f"{base / 'config.json'}: architecture {arch!r}, but {BASE_INFO} recorded {info.get('architecture')!r}"
            )
        expected_params = info.get("parameters")
    shapes = weight_shapes(base)
    layers = {int(m.group(1)) for k in shapes if (m := LAYER.search(k))}
    declared = config.get("num_hidden_layers")
    if isinstance(declared, int) and layers and declared != len(layers):
        raise ValueError(
            f"{base / 'config.json'}: num_hidden_layers is {declared}, but the weights hold {len(layers)} layers"
        )
    try:
        hf_config = AutoConfig.from_pretrained(str(base))
        with torch.device("meta"):
            reference = AutoModelForCausalLM.from_config(hf_config)
    except Exception as exc:  # transformers' own checks of config.json
        raise ValueError(f"{base / 'config.json'}: cannot describe a model ({exc})") from None
    params = sum(p.numel() for p in reference.parameters())
    if expected_params is not None and params != expected_params:
        raise ValueError(
            f"{base / 'config.json'}: describes {params} parameters, but {BASE_INFO} recorded {expected_params}"
        )
    tied = getattr(hf_config, "tie_word_embeddings", False)
    for name, tensor in reference.state_dict().items():
        if name not in shapes:
            if tied and name.endswith("lm_head.weight"):
                continue
            raise ValueError(f"{base}: the weights lack {name!r}, which config.json's model has")
        if tuple(tensor.shape) != shapes[name]:
            raise ValueError(
                f"{base}: weight {name!r} has shape {list(shapes[name])}, but config.json's model needs "
                f"{list(tensor.shape)}"
            )
    return config


def check_base_seed(cfg: ExperimentConfig, spec: RunSpec, base_dir: str | Path) -> dict:
    """`{"name", "seed", "sft_seed"}` of the base `spec` starts from (`ExperimentConfig.base_of`; the
    seeds as its `sft.json` recorded them, None for a pretrained model); ValueError when that file
    records another base seed than the config gives the run's seed."""
    base = Path(base_dir)
    record = {"name": cfg.base_of(spec.model, spec.seed), "seed": None, "sft_seed": None}
    info_path = base / "sft.json"
    if cfg.model(spec.model).source != "scratch" or not info_path.is_file():
        return record
    info = _json_object(info_path, "the record `fp8rl sft` writes")
    want = cfg.sft.base_seed(spec.seed)
    if info.get("seed") != want:
        how = (
            "one base shared by every run (sft.per_seed: false)"
            if want is None
            else f"base seed {want}"
            + (f" (seed {spec.seed} % sft.bases {cfg.sft.bases})" if cfg.sft.bases is not None else "")
        )
        raise ValueError(
            f"{info_path}: the base of seed {info.get('seed')!r}, but run seed {spec.seed} starts from {how}"
        )
    return record | {"seed": info.get("seed"), "sft_seed": info.get("sft_seed")}


def positions(config: dict) -> int | None:
    """The positions (context length) a model's `config.json` gives it, or None when it names none."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(config.get(key), int) and not isinstance(config.get(key), bool):
            return config[key]
    return None


def check_train_data(cfg: ExperimentConfig, base_dir: str | Path, data_dir: str | Path, config: dict) -> None:
    """Every row of `train.jsonl`, and its prompt plus `schedule.max_new_tokens` within the base model's
    positions; ValueError naming the file and line."""
    from fp8rl.engine.tokenizer import encode_prompts, load_tokenizer

    path = Path(data_dir) / "train.jsonl"
    rows = load_split_lines(data_dir, "train.jsonl")
    limit = positions(config)
    if limit is None:
        return
    tokenizer = load_tokenizer(base_dir)
    new = cfg.schedule.max_new_tokens
    what = f"the prompt plus schedule.max_new_tokens ({new})"
    encoded = encode_prompts(tokenizer, [r["prompt"] for _, r in rows])
    tokens = {id(r): len(ids) for (_, r), ids in zip(rows, encoded, strict=True)}
    if problem := length_problem(rows, path, lambda r: tokens[id(r)] + new, limit, what):
        raise ValueError(problem)


def check_sft_data(cfg: ExperimentConfig, model: str, data_dir: str | Path) -> None:
    """The splits `fp8rl sft` reads (`train.jsonl`, `test.jsonl`, `tool_train.jsonl` when there is one),
    each row checked, and every SFT example (prompt, target, `<eos>`) and test prompt plus
    `schedule.max_new_tokens` within `models[].arch.max_position_embeddings`; ValueError naming the
    file and line."""
    from fp8rl.engine import tasks
    from fp8rl.engine.bpe_tokenizer import scratch_tokenizer

    data = Path(data_dir)
    tok = scratch_tokenizer(cfg.model(model).tokenizer, data)
    limit = cfg.model(model).arch.max_position_embeddings

    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    names = ["train.jsonl", "test.jsonl"] + (
        ["tool_train.jsonl"] if (data / "tool_train.jsonl").is_file() else []
    )
    for name in names:
        rows = load_split_lines(data, name)
        if name == "test.jsonl":
            new = cfg.schedule.max_new_tokens
            length, what = (
                (lambda r, new=new: n(r["prompt"]) + new),
                f"the prompt plus schedule.max_new_tokens ({new})",
            )
        else:
            length, what = (
                (lambda r: n(r["prompt"]) + n(tasks.sft_target(r)) + 1),
                "the SFT example (prompt, target, <eos>)",
            )
        if problem := length_problem(rows, data / name, length, limit, what):
            raise ValueError(problem)
