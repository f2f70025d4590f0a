"""Atomic file writes: nothing half-written is ever left behind.

Every writer puts its bytes in a temp file in the destination's folder, fsyncs it and renames it over
the destination, so a reader (or a run restarted after SIGKILL) sees the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)` to fill a temp file next to `path`, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual mode
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def settle_dir(path: str | Path) -> None:
    """Ready a directory built in a temp location for its rename into place: the usual modes under the
    umask (mkdtemp makes it 0700), and every file and the directory itself fsynced, so the renamed
    directory is complete on disk even after a power loss."""
    path = Path(path)
    os.chmod(path, 0o777 & ~_UMASK)
    for f in path.iterdir():
        if f.is_file():
            os.chmod(f, 0o666 & ~_UMASK)
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(path)


def fsync_dir(path: str | Path) -> None:
    """fsync a directory, making the creation, removal or rename of its entries durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False, allow_nan=False) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))


def read_jsonl(path: str | Path, *, drop_cut_tail: bool = False) -> list[dict]:
    """Read a JSONL file; a malformed line raises ValueError naming the file and line. With
    `drop_cut_tail`, a malformed last line without its newline (the cut-off write of a killed writer)
    is dropped instead."""
    text = Path(path).read_text()
    lines = text.split("\n")
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if drop_cut_tail and lineno == len(lines) and not text.endswith("\n"):
                break
            raise ValueError(f"{path}:{lineno}: malformed JSON line ({exc.msg})") from None
    return rows


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in 1 MiB chunks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
