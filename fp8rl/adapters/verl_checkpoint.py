"""The final Hugging Face checkpoint of a verl run, from verl 0.9.1's own checkpoint layout.

verl's Megatron checkpoint manager (`verl.utils.checkpoint.megatron_checkpoint_manager`, layout schema 2)
writes each save to `{default_local_dir}/global_step_N/actor/` and names what it holds in
`ckpt_contents.json`: with verl's defaults (`use_dist_checkpointing: false`, a bridge: mbridge here) the
model is a Hugging Face tree at `model/huggingface/` (weights, config.json, tokenizer), and there is no
`model/dist_ckpt/` for the Megatron model merger to read. `export` follows the manifest: it copies the
Hugging Face tree, or runs verl's model merger on Megatron shards when a run did write them, into the
run's `checkpoint/` (written beside it and renamed into place, so a half-written export is never taken
for a checkpoint), then normalises config.json for older readers (`compat_config`).

    python -m fp8rl.adapters.verl_checkpoint export ACTOR_DIR TARGET_DIR
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


def export(actor: Path, target: Path, *, python: str = sys.executable) -> Path:
    """Write the Hugging Face checkpoint of the verl save `actor` to `target` (replacing it)."""
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
    if not any(tmp.glob("*.safetensors")):
        raise CheckpointError(f"{src}: no *.safetensors weights")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "export":
        print("usage: python -m fp8rl.adapters.verl_checkpoint export ACTOR_DIR TARGET_DIR", file=sys.stderr)
        return 2
    try:
        print(export(Path(args[1]), Path(args[2])))
    except (CheckpointError, OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
