"""Kill-safe training checkpoints: an HF model directory that also carries the full trainer state.

`checkpoint/` holds the Hugging Face files of the current policy (so lm-eval's `hf` model loads it as
it is), `trainer_state.pt` (policy and rollout-copy state dicts incl. any FP8 scaling buffers, optimizer
state, calibrator and spike-detector state, every RNG) and `state.json` (step, the metrics.jsonl byte
offset, run id, config digest, and the sha256 of each file), written last. The directory is built
beside the target and renamed into place (`model.replace_dir`), so after a SIGKILL at any instant either
the previous or the new checkpoint is complete. `load_checkpoint` checks the hashes and raises
`CheckpointError` naming the file that is missing or corrupt.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from fp8rl.engine.model import replace_dir, write_hf_files
from fp8rl.io import sha256_file

STATE_FILE = "state.json"
TRAINER_FILE = "trainer_state.pt"


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed from; the message names the file and what to do."""


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(
    ckpt_dir: str | Path, model: torch.nn.Module, tokenizer, trainer_state: dict, meta: dict
) -> None:
    """Write the checkpoint atomically; `meta` (json-able: step, metrics_offset, ...) goes to state.json."""
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{ckpt_dir.name}.", suffix=".tmp", dir=ckpt_dir.parent))
    try:
        write_hf_files(model, tokenizer, tmp)
        buf = io.BytesIO()
        torch.save({**trainer_state, "rng": rng_state()}, buf)
        (tmp / TRAINER_FILE).write_bytes(buf.getvalue())
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / STATE_FILE).write_text(json.dumps({**meta, "files": files}, indent=2) + "\n")
        replace_dir(tmp, ckpt_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_dir(ckpt_dir: Path) -> None:
    """After a kill between the two renames of `replace_dir`, only `checkpoint.old` exists: restore it."""
    old = ckpt_dir.with_name(ckpt_dir.name + ".old")
    if not ckpt_dir.exists() and old.is_dir():
        old.rename(ckpt_dir)
    for stale in ckpt_dir.parent.glob(f".{ckpt_dir.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def has_checkpoint(ckpt_dir: str | Path) -> bool:
    ckpt_dir = Path(ckpt_dir)
    recover_dir(ckpt_dir)
    return ckpt_dir.is_dir() and any(ckpt_dir.iterdir())


def verify_checkpoint(ckpt_dir: str | Path) -> dict:
    """The checkpoint's `state.json` after checking every file's hash; `CheckpointError` naming the
    file that is missing or altered."""
    ckpt_dir = Path(ckpt_dir)
    hint = f"delete {ckpt_dir} to restart the run from its base model"
    state_path = ckpt_dir / STATE_FILE
    try:
        meta = json.loads(state_path.read_text())
        files = meta["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{state_path}: unreadable checkpoint state ({exc.__class__.__name__}); {hint}"
        ) from None
    for name, digest in files.items():
        path = ckpt_dir / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint; {hint}")
        if sha256_file(path) != digest:
            raise CheckpointError(f"{path}: corrupt (sha256 differs from state.json); {hint}")
    if TRAINER_FILE not in files:
        raise CheckpointError(f"{ckpt_dir}: no {TRAINER_FILE} recorded; {hint}")
    return meta


def load_checkpoint(ckpt_dir: str | Path) -> tuple[dict, dict]:
    """`(meta, trainer_state)` of a checkpoint; `CheckpointError` if a file is missing or altered."""
    ckpt_dir = Path(ckpt_dir)
    hint = f"delete {ckpt_dir} to restart the run from its base model"
    meta = verify_checkpoint(ckpt_dir)
    try:
        trainer_state = torch.load(ckpt_dir / TRAINER_FILE, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise CheckpointError(f"{ckpt_dir / TRAINER_FILE}: cannot be loaded ({exc}); {hint}") from None
    return meta, trainer_state


def resumable_checkpoint(ckpt_dir: str | Path, *, run_id: str, train_digest: str) -> tuple[dict, dict] | None:
    """`(meta, trainer_state)` of the checkpoint a run resumes from, or None to start it afresh: there is
    none, or it was written under other training settings (its `train_digest` differs; said on stderr).
    ValueError if it belongs to another run; `CheckpointError` if it is damaged."""
    if not has_checkpoint(ckpt_dir):
        return None
    meta, state = load_checkpoint(ckpt_dir)
    if meta.get("run_id") != run_id:
        raise ValueError(f"{ckpt_dir}: belongs to run {meta.get('run_id')!r}")
    if meta.get("train_digest") != train_digest:
        print(
            f"{run_id}: the checkpoint in {ckpt_dir} was written under other training settings; "
            "starting the run afresh",
            file=sys.stderr,
        )
        return None
    return meta, state
