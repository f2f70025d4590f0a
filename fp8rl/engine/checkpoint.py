"""Kill-safe training checkpoints: an HF model directory that also carries the full trainer state.

`checkpoint/` holds the Hugging Face files of the current policy (so lm-eval's `hf` model loads it as
it is), `trainer_state.pt` (policy and rollout-copy state dicts incl. any FP8 scaling buffers, optimizer
state, calibrator and spike-detector state, every RNG) and `state.json` (step, the metrics.jsonl byte
offset, run id, config digest, and the sha256 of each file), written last. The directory is built
beside the target, given the usual modes, fsynced and renamed into place (`fp8rl.io.replace_dir`), so after
a SIGKILL or a power loss at any instant either the previous or the new checkpoint is complete; what a
kill leaves behind (`checkpoint.old`, `.checkpoint.*.tmp`) is cleaned up before the next resume
(`fp8rl.io.recover_dir`).

`trainer_state.pt` holds tensors and plain Python values only (the numpy RNG state is stored as a
tensor and numbers), and is read with `torch.load(weights_only=True)`: a checkpoint can never run code
when it is loaded (the hashes in state.json detect damage, they authenticate nothing).
`load_checkpoint` raises `CheckpointError` naming the file that is missing, corrupt or holds objects.
"""

from __future__ import annotations

import io
import json
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import torch

from fp8rl.checkpoint_files import CheckpointError, verify_files
from fp8rl.engine.model import write_hf_files
from fp8rl.io import recover_dir, sha256_file, staged_dir
from fp8rl.run_files import CHECKPOINT_STATE_FILE

STATE_FILE = CHECKPOINT_STATE_FILE
TRAINER_FILE = "trainer_state.pt"


def rng_state() -> dict:
    """Every global RNG, as tensors and plain values (numpy's MT19937 keys as an int64 tensor)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    numpy = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
             "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}  # fmt: skip
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": numpy}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))


def _plain(obj):
    """`obj` with numpy scalars as Python numbers and arrays as tensors, so it loads `weights_only`."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    return obj


def save_checkpoint(
    ckpt_dir: str | Path, model: torch.nn.Module, tokenizer, trainer_state: dict, meta: dict
) -> None:
    """Write the checkpoint atomically; `meta` (json-able: step, metrics_offset, ...) goes to state.json."""
    with staged_dir(ckpt_dir) as tmp:
        write_hf_files(model, tokenizer, tmp)
        buf = io.BytesIO()
        torch.save(_plain({**trainer_state, "rng": rng_state()}), buf)
        (tmp / TRAINER_FILE).write_bytes(buf.getvalue())
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / STATE_FILE).write_text(json.dumps({**meta, "files": files}, indent=2) + "\n")


def keep_weights(kept_dir: str | Path, model: torch.nn.Module, tokenizer, meta: dict) -> None:
    """Write the policy's Hugging Face files (no trainer state: not resumable, loadable by every
    evaluator) atomically into `kept_dir`, a checkpoint history entry, with a `state.json` recording
    their hashes and `meta`."""
    with staged_dir(kept_dir) as tmp:
        write_hf_files(model, tokenizer, tmp)
        files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / STATE_FILE).write_text(json.dumps({**meta, "files": files}, indent=2) + "\n")


def has_checkpoint(ckpt_dir: str | Path) -> bool:
    ckpt_dir = Path(ckpt_dir)
    recover_dir(ckpt_dir)
    return ckpt_dir.is_dir() and any(ckpt_dir.iterdir())


def verify_checkpoint(ckpt_dir: str | Path) -> dict:
    """The checkpoint's `state.json` after checking every file's hash (fp8rl.checkpoint_files);
    `CheckpointError` naming the file that is missing or altered."""
    ckpt_dir = Path(ckpt_dir)
    hint = f"delete {ckpt_dir} to restart the run from its base model"
    meta = verify_files(ckpt_dir, hint)
    if meta is None:
        raise CheckpointError(f"{ckpt_dir / STATE_FILE}: unreadable checkpoint state (missing); {hint}")
    if TRAINER_FILE not in meta["files"]:
        raise CheckpointError(f"{ckpt_dir}: no {TRAINER_FILE} recorded; {hint}")
    return meta


def load_checkpoint(ckpt_dir: str | Path) -> tuple[dict, dict]:
    """`(meta, trainer_state)` of a checkpoint; `CheckpointError` if a file is missing or altered."""
    ckpt_dir = Path(ckpt_dir)
    hint = f"delete {ckpt_dir} to restart the run from its base model"
    meta = verify_checkpoint(ckpt_dir)
    path = ckpt_dir / TRAINER_FILE
    try:
        trainer_state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else exc.__class__.__name__
        raise CheckpointError(
            f"{path}: holds objects other than tensors and plain values, which are never unpickled "
            f"({first}); {hint}"
        ) from None
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot be loaded ({exc}); {hint}") from None
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
