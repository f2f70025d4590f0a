"""Atomic file writes: nothing half-written is ever left behind.

Every writer puts its bytes in a temp file in the destination's folder, fsyncs it and renames it over
the destination, so a reader (or a run restarted after SIGKILL) sees the old file or the new one. A
directory (a checkpoint, a publication) is built beside its destination and swapped in whole
(`staged_dir`, `replace_dir`); `recover_dir` undoes what a kill in the middle of that leaves. Temp files and folders
are named `.{name}.*.tmp` after their destination, so a writer that holds its destination exclusively
can remove those a killed writer left (`remove_stale_temps`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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


def temp_names(folder: str | Path, name: str = "*") -> list[Path]:
    """The temp files and folders of the writers of `folder/name` (`.{name}.*.tmp`; `*`: of any file)."""
    return sorted(Path(folder).glob(f".{name}.*.tmp"))


def remove_stale_temps(folder: str | Path, name: str = "*") -> list[Path]:
    """Remove the temp files and folders killed writers of `folder/name` left (`temp_names`); returns
    them. Only for a caller that holds the destination exclusively: a live writer's temp goes too."""
    stale = temp_names(folder, name)
    for p in stale:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return stale


# renameat2(2)'s flag that swaps two existing names in one step (Linux >= 3.15; ext4, xfs, btrfs, tmpfs)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange_dirs(a: str | Path, b: str | Path) -> bool:
    """Swap the names `a` and `b` (both exist) in one atomic step; False where the OS or the filesystem
    cannot (no renameat2, or a filesystem without RENAME_EXCHANGE such as NFS), having changed nothing."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a))


def replace_dir(src: Path, dst: Path) -> None:
    """Move directory `src` to `dst`, replacing `dst`. Where the filesystem can swap two names atomically
    (`exchange_dirs`) `dst` is complete at every instant, the old one or the new one, and the old one is
    then removed from `src`'s name; elsewhere the old one is renamed to `dst.old` first, so that at every
    instant `dst` or `dst.old` is complete (`recover_dir` puts `dst.old` back after a kill)."""
    src, dst = Path(src), Path(dst)
    old = dst.with_name(dst.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if dst.exists():
        if exchange_dirs(src, dst):
            fsync_dir(dst.parent)
            shutil.rmtree(src, ignore_errors=True)
            return
        os.replace(dst, old)
    os.replace(src, dst)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def staged_dir(dest: str | Path, *, settle: Callable[[Path], None] = settle_dir) -> Iterator[Path]:
    """A temp folder beside `dest` (`.{name}.*.tmp`) in which the body builds the new `dest`. When the body
    ends, `settle(tmp)` makes its content durable (`settle_dir`: the usual modes, every file and the
    folder fsynced), `replace_dir` swaps it in and the parent is fsynced; on any error it is removed."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        settle(tmp)
        replace_dir(tmp, dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_dir(dst: Path) -> None:
    """Undo what a kill inside `replace_dir` (or while building the new directory) leaves: `dst.old`
    without `dst` (killed between the two renames) is put back; `dst.old` beside a complete `dst`
    (killed before its removal) and the temp folders `.{dst name}.*.tmp` are removed. Only for a caller
    that holds `dst` exclusively."""
    dst = Path(dst)
    old = dst.with_name(dst.name + ".old")
    if not dst.exists() and old.is_dir():
        old.rename(dst)
    elif old.exists():
        shutil.rmtree(old, ignore_errors=True)
    remove_stale_temps(dst.parent, dst.name)


def fsync_dir(path: str | Path) -> None:
    """fsync a directory, making the creation, removal or rename of its entries durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file and folder under `root`, deepest first, then `root`: a folder tree built in a temp
    location (`staged_dir(..., settle=fsync_tree)`) is complete on disk before its rename."""
    root = Path(root)
    for p in sorted(root.rglob("*"), reverse=True):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
        else:
            fsync_dir(p)
    fsync_dir(root)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False, allow_nan=False) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))


def loads_json(data: bytes | str) -> Any:
    """JSON from a file another process (or a person) wrote: `json.JSONDecodeError` (a ValueError) for
    text that is not JSON, `UnicodeDecodeError` for bytes that are not UTF-8, and a ValueError too, never
    a `RecursionError` or a traceback, for nesting deeper than Python's parser recurses and for an
    integer of more digits than Python converts. An integer too large for a float still parses: a reader
    that takes numbers checks them (`is_number`)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text[:64], 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise json.JSONDecodeError(f"a number too long ({exc})", text[:64], 0) from None


def is_number(v: Any) -> bool:
    """A JSON number a reader can take as a float: an int (not a bool) that fits a float, or a float
    (NaN and ±inf included: a diverging run logs them)."""
    if isinstance(v, bool):
        return False
    return isinstance(v, float) or (isinstance(v, int) and -sys.float_info.max <= v <= sys.float_info.max)


def read_jsonl(path: str | Path, *, drop_cut_tail: bool = False) -> list:
    """Read a JSONL file; a line that is not UTF-8 or not JSON raises ValueError naming the file and
    line. With `drop_cut_tail`, a malformed last line without its newline (the cut-off write of a killed
    writer) is dropped instead."""
    return [row for _, row in read_jsonl_lines(path, drop_cut_tail=drop_cut_tail)]


def read_jsonl_lines(path: str | Path, *, drop_cut_tail: bool = False) -> list[tuple[int, Any]]:
    """`read_jsonl` with each value's line number: `[(line, value), ...]`, blank lines skipped."""
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    rows = []
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        cut = drop_cut_tail and lineno == len(lines) and not data.endswith(b"\n")
        try:
            rows.append((lineno, loads_json(raw)))
        except UnicodeDecodeError as exc:
            if cut:
                break
            raise ValueError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start + 1} of the line)") from None
        except json.JSONDecodeError as exc:
            if cut:
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
