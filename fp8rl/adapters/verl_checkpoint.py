"""The final Hugging Face checkpoint of a verl run, from verl 0.9.1's own checkpoint layout.

verl's Megatron checkpoint manager (`verl.utils.checkpoint.megatron_checkpoint_manager`, layout schema 2)
writes each save to `{default_local_dir}/global_step_N/actor/` and names what it holds in
`ckpt_contents.json`: with verl's defaults (`use_dist_checkpointing: false`, a bridge: mbridge here) the
model is a Hugging Face tree at `model/huggingface/` (weights, config.json, tokenizer), and there is no
`model/dist_ckpt/` for the Megatron model merger to read. `export` follows the manifest: it copies the
Hugging Face tree, or runs verl's model merger on Megatron shards when a run did write them, into the
run's `checkpoint/` (written beside it and renamed into place, so a half-written export is never taken
for a checkpoint), then normalises config.json for older readers (`compat_config`).

The tokenizer is the base model's: RL never changes it, and the one verl saves is written by the train
image's transformers 5, whose `tokenizer_config.json` (`extra_special_tokens` as a list) the bfcl
image's transformers 4.51.3 cannot load. With `--tokenizer BASE_DIR` (the job script passes the base
snapshot) its `TOKENIZER_FILES` replace verl's; without one, verl's config is converted
(`compat_tokenizer_config`).

    python -m fp8rl.adapters.verl_checkpoint export ACTOR_DIR TARGET_DIR [--tokenizer BASE_DIR]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

MANIFEST = "ckpt_contents.json"
HF_SUBDIR = Path("model") / "huggingface"  # verl.utils.megatron_utils.get_hf_model_checkpoint_path
DIST_SUBDIR = Path("model") / "dist_ckpt"  # get_model_dist_checkpoint_path
TOKENIZER_CONFIG = "tokenizer_config.json"
# what `save_pretrained` of a tokenizer writes (transformers 4 and 5, slow and fast)
TOKENIZER_FILES = (
    TOKENIZER_CONFIG,
    "tokenizer.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)


class CheckpointError(RuntimeError):
    """A verl checkpoint the export cannot read; the message names the directory."""


def model_source(actor: Path) -> tuple[str, Path]:
    """`("huggingface" | "megatron", path)`: where the model of one verl save is, per its manifest (or,
    without one, the layout's directories)."""
    manifest = actor / MANIFEST
    if manifest.is_file():
        entry = json.loads(manifest.read_text()).get("contents", {}).get("model")
        if not entry:
            raise CheckpointError(f"{manifest}: no model in the checkpoint's contents")
        kind = "huggingface" if entry["format"] == "huggingface" else "megatron"
        return kind, actor / entry["path"]
    if (actor / HF_SUBDIR / "config.json").is_file():
        return "huggingface", actor / HF_SUBDIR
    if (actor / DIST_SUBDIR).is_dir():
        return "megatron", actor / DIST_SUBDIR
    raise CheckpointError(
        f"{actor}: neither {MANIFEST} nor {HF_SUBDIR}/ nor {DIST_SUBDIR}/ (not a verl save)"
    )


def compat_config(config: dict) -> dict:
    """config.json readable by transformers 4.x too: transformers 5 writes the RoPE settings only as
    `rope_parameters` (`rope_theta` inside it), and 4.x, reading no top-level `rope_theta`, falls back
    to its default base (10 000; Qwen3 and Qwen2.5 use 1 000 000). The top-level keys are restored."""
    out = dict(config)
    rope = out.get("rope_parameters")
    if isinstance(rope, dict):
        if "rope_theta" in rope and "rope_theta" not in out:
            out["rope_theta"] = rope["rope_theta"]
        if rope.get("rope_type", "default") != "default" and out.get("rope_scaling") is None:
            out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    return out


# transformers 5's class for any tokenizer.json-backed tokenizer, which 4.x does not have
TF5_TOKENIZER_CLASS = "TokenizersBackend"


def compat_tokenizer_config(config: dict) -> dict:
    """tokenizer_config.json readable by transformers 4.x too: transformers 5 writes the additional
    special tokens as an `extra_special_tokens` list, which 4.x reads as a name -> token mapping
    (`'list' object has no attribute 'keys'`): the list goes back to `additional_special_tokens`; and it
    names the class `TokenizersBackend` (`Tokenizer class TokenizersBackend does not exist`): 4.x's
    class for the same tokenizer.json is `PreTrainedTokenizerFast`."""
    out = dict(config)
    if out.get("tokenizer_class") == TF5_TOKENIZER_CLASS:
        out["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = out.get("extra_special_tokens")
    if isinstance(extra, list):
        del out["extra_special_tokens"]
        known = list(out.get("additional_special_tokens") or [])
        out["additional_special_tokens"] = known + [t for t in extra if t not in known]
    return out


def use_tokenizer(model: Path, tokenizer: Path | None) -> None:
    """Give the exported model `model` the tokenizer of `tokenizer` (the base snapshot): its
    `TOKENIZER_FILES` replace the ones verl saved. Without a directory that has a tokenizer config,
    verl's config is made readable by transformers 4 (`compat_tokenizer_config`)."""
    if tokenizer is not None and (Path(tokenizer) / TOKENIZER_CONFIG).is_file():
        for name in TOKENIZER_FILES:
            (model / name).unlink(missing_ok=True)
            if (Path(tokenizer) / name).is_file():
                shutil.copyfile(Path(tokenizer) / name, model / name)
        return
    config = model / TOKENIZER_CONFIG
    if config.is_file():
        text = json.dumps(compat_tokenizer_config(json.loads(config.read_text())), indent=2)
        config.write_text(text + "\n")


def export(actor: Path, target: Path, *, python: str = sys.executable, tokenizer: Path | None = None) -> Path:
    """Write the Hugging Face checkpoint of the verl save `actor` to `target` (replacing it), with the
    tokenizer of `tokenizer` (module docstring)."""
    actor, target = Path(actor), Path(target)
    kind, src = model_source(actor)
    tmp = target.with_name(f".{target.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    if kind == "huggingface":
        if not (src / "config.json").is_file():
            raise CheckpointError(f"{src}: no config.json (the save is incomplete)")
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("adapter"))
    else:
        merge = [python, "-m", "verl.model_merger", "merge", "--backend", "megatron",
                 "--local_dir", str(actor), "--target_dir", str(tmp)]  # fmt: skip
        subprocess.run(merge, check=True)
    config = tmp / "config.json"
    config.write_text(json.dumps(compat_config(json.loads(config.read_text())), indent=2) + "\n")
    use_tokenizer(tmp, tokenizer)
    if not any(tmp.glob("*.safetensors")):
        raise CheckpointError(f"{src}: no *.safetensors weights")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


USAGE = "usage: python -m fp8rl.adapters.verl_checkpoint export ACTOR_DIR TARGET_DIR [--tokenizer BASE_DIR]"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    tokenizer = None
    if len(args) == 5 and args[3] == "--tokenizer":
        args, tokenizer = args[:3], Path(args[4])
    if len(args) != 3 or args[0] != "export":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(export(Path(args[1]), Path(args[2]), tokenizer=tokenizer))
    except (CheckpointError, OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
