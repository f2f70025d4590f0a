"""A reference-trainer checkpoint's own record of its files, and the check that they are still those.

The trainer writes `checkpoint/state.json` last (fp8rl.engine.checkpoint), with the sha256 of every
other file of the checkpoint under `files`. `verify_files` re-hashes them: resume (fp8rl.engine.checkpoint),
`fp8rl eval` and `fp8rl report` call it, so a checkpoint damaged after training (a flipped byte in
`model.safetensors`) is named instead of trained on, scored or reported, and so is a file the record does
not hold (a `chat_template.jinja` added later would change how the eval prompts the model). The hashes detect damage; they
authenticate nothing. A checkpoint without `state.json` (a Hugging Face model made elsewhere, the verl
backend's export) has no record to check against: `verify_files` returns None. `not_a_file` finds a
Hugging Face file (`HF_FILES`) that is a directory, for the eval's and the trainer's loaders.
`checkpoint_digest` fingerprints any checkpoint folder, the eval's record of what it scored.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from fp8rl.io import loads_json, sha256_file
from fp8rl.run_files import CHECKPOINT_STATE_FILE

# The files of a Hugging Face model folder that transformers reads when they are there: each must be a
# file (a directory in their place makes transformers blame a missing package, not the file).
HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model",
            "added_tokens.json")  # fmt: skip


def not_a_file(model_dir: str | Path) -> Path | None:
    """The first of `HF_FILES` that exists in `model_dir` but is not a file, or None."""
    return next((p for p in (Path(model_dir) / n for n in HF_FILES) if p.exists() and not p.is_file()), None)


class CheckpointError(Exception):
    """A checkpoint whose files are not the ones it recorded; the message names the file."""


def verify_files(ckpt_dir: str | Path, hint: str = "") -> dict | None:
    """The checkpoint's `state.json` after checking that every file it records has its sha256 and that it
    holds nothing else; None when the checkpoint has no `state.json`. `CheckpointError` naming the file
    that is unreadable, missing, not a file, altered or not recorded (`hint`, if given, is appended: what
    to do about it)."""
    ckpt_dir = Path(ckpt_dir)
    tail = f"; {hint}" if hint else ""
    state_path = ckpt_dir / CHECKPOINT_STATE_FILE
    if not state_path.exists() and not state_path.is_symlink():
        return None
    try:
        meta = loads_json(state_path.read_bytes())
        files = meta["files"]
        items = list(files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(
            f"{state_path}: unreadable checkpoint state ({exc.__class__.__name__}){tail}"
        ) from None
    for name, digest in items:
        path = ckpt_dir / str(name)
        if "/" in str(name) or str(name) in ("", ".", ".."):
            raise CheckpointError(f"{state_path}: records {name!r}, not a file of the checkpoint{tail}")
        if not path.is_file():
            what = "not a file" if path.exists() else "missing from the checkpoint"
            raise CheckpointError(f"{path}: {what}{tail}")
        try:
            actual = sha256_file(path)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc}){tail}") from None
        if actual != digest:
            raise CheckpointError(f"{path}: corrupt (sha256 differs from {state_path.name}){tail}")
    recorded = {str(name) for name, _ in items} | {CHECKPOINT_STATE_FILE}
    for path in sorted(ckpt_dir.iterdir()):
        if path.name not in recorded:  # e.g. a chat_template.jinja that would switch the eval's prompts
            raise CheckpointError(f"{path}: not a file the checkpoint recorded in {state_path.name}{tail}")
    return meta


def checkpoint_digest(ckpt_dir: str | Path) -> str | None:
    """A fingerprint of a checkpoint directory's files (None when it does not exist): the sha256 over
    every file's relative path, size and content, of the first and last MiB only for a file above 4 MiB
    (weights: retraining changes them throughout). The reference trainer's `state.json`, hashed whole,
    records the sha256 of every file, so its checkpoints are pinned byte for byte. The eval result
    records it (`checkpoint_digest`); the report checks it against the run's checkpoint."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        size = p.stat().st_size
        h.update(f"{p.relative_to(root).as_posix()}\0{size}\0".encode())
        with open(p, "rb") as fh:
            if size <= 4 << 20:
                h.update(fh.read())
            else:
                h.update(fh.read(1 << 20))
                fh.seek(size - (1 << 20))
                h.update(fh.read())
    return h.hexdigest()


def scored_another_checkpoint(result: dict, checkpoint: Path) -> bool:
    """Whether an eval result file (`result`, its JSON) scored another checkpoint than `checkpoint`'s
    files hold now (its `checkpoint_digest` differs: retrained since); False where either digest is
    unknown (a file written before the digest was recorded, a checkpoint without files)."""
    scored = result.get("checkpoint_digest")
    return scored is not None and (now := checkpoint_digest(checkpoint)) is not None and scored != now
