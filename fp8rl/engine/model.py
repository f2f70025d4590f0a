"""The policy model: a `transformers` causal LM (a scratch Llama built from the config's `arch`, or a
pretrained model of any architecture: fp8rl.engine.pretrained), saved in Hugging Face format.

`build_model` makes a randomly initialised `LlamaForCausalLM` sized by `ArchConfig` for a tokenizer;
`save_hf` writes model + tokenizer (config.json, model.safetensors, tokenizer files, generation config)
into a directory atomically (a temp sibling renamed into place), so that lm-eval's `hf` model and
`AutoModelForCausalLM.from_pretrained` load it as it is. A model whose linears were swapped for FP8 or
bf16-emulation modules is saved through the weights of its plain architecture only (`plain_state_dict`,
built with `AutoModelForCausalLM.from_config`), so Llama, Qwen2 and the other `transformers` causal LMs
round-trip alike.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from fp8rl import numerics
from fp8rl.config import ArchConfig
from fp8rl.io import replace_dir, settle_dir

numerics.pin_gemms()  # reproducible mode: every CPU GEMM on the pinned kernel (fp8rl.pinned_blas)

hf_logging.disable_progress_bar()  # no "Writing model shards" bars in every checkpoint's log lines


def llama_config(arch: ArchConfig, tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_layers,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads or arch.num_heads,
        max_position_embeddings=arch.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        attn_implementation="sdpa",
    )


def build_model(arch: ArchConfig, tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A fresh fp32 Llama for `tokenizer`, initialised from `seed` (same seed, same weights)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(llama_config(arch, tokenizer))
    _set_generation_ids(model, tokenizer)
    return model


def _set_generation_ids(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase) -> None:
    gc = model.generation_config
    gc.eos_token_id = tokenizer.eos_token_id
    gc.pad_token_id = tokenizer.pad_token_id
    gc.bos_token_id = tokenizer.bos_token_id


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def plain_model(config) -> torch.nn.Module:
    """An unconverted model of `config`'s architecture, randomly initialised (on the current device)."""
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def plain_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under its plain architecture's key names (extra buffers of converted
    linears, e.g. amax histories, are dropped)."""
    if not hasattr(model, "config"):
        return {}
    with torch.device("meta"):
        reference = plain_model(model.config).state_dict()
    sd = model.state_dict()
    missing = [k for k in reference if k not in sd]
    if missing:
        raise ValueError(
            f"model lacks {model.config.model_type} weights {missing[:3]}... (was a linear renamed?)"
        )
    return {k: sd[k].detach().to(torch.float32).contiguous() for k in reference}


def save_hf(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Write model + tokenizer to `out_dir` in Hugging Face format, atomically (replaces `out_dir`).

    `extra` maps file names to bytes written into the same directory before it is renamed into place.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        write_hf_files(model, tokenizer, tmp)
        for name, blob in (extra or {}).items():
            (tmp / name).write_bytes(blob)
        settle_dir(tmp)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def write_hf_files(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, out_dir: Path) -> None:
    """Write the HF files (not atomically) into an existing directory."""
    plain = plain_model(model.config)
    plain.load_state_dict(plain_state_dict(model))
    plain.generation_config = model.generation_config
    plain.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))


def load_hf(path: str | Path) -> torch.nn.Module:
    """Load a saved policy (any `AutoModelForCausalLM` architecture) in fp32, train mode off; a clear
    ValueError if the folder is not one."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: not a model checkpoint (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model
