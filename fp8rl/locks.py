"""One writer at a time: an exclusive `fcntl.flock` on a lock file that names its holder.

`hold_lock(lock_file, hint)` holds the file for the body of a `with`, without waiting: a second process
gets `RunDirLocked` naming the holder (the pid, host and start time written into the file) and `hint`,
what to do about it. The kernel releases the lock when the holder's process ends, however it ends; a lock
file left by a killed holder is simply taken over. A run directory (`RunDir.lock`, fp8rl.run_files), a
tier's report, an `fp8rl data` output and the workflow's DAG each hold one. A filesystem without flock
(Lustre without `-o flock`, some NFS) raises `LockUnsupported`; `FP8RL_NO_FLOCK=1` runs without the lock
where the scheduler alone keeps one writer. A lock path that is a link (symbolic or hard) or not a plain
file is refused (`LockNotAFile`), never written through.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RunDirLocked(Exception):
    """Another process holds the lock (of a run directory, or of a tier's report: `hold_lock`); the
    message names the directory and the holder."""


class LockUnsupported(RunDirLocked):
    """The filesystem refuses `flock` (Lustre mounted without `-o flock`, some NFS setups): the message
    names the file and the two ways out."""


class LockNotAFile(RunDirLocked):
    """The lock path is a link, or not a plain file of its own (a hard link, a fifo, a device): locking
    it would write through to what it points at, so it is refused; the message names it."""


# Set to 1 where the results filesystem has no flock and the scheduler alone keeps one writer per run.
NO_FLOCK_ENV = "FP8RL_NO_FLOCK"


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` (itself included) that does not exist yet, or None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _remove_empty(path: Path, *, up_to: Path) -> None:
    """Remove `path` and its parents up to `up_to` (included) while they are empty."""
    for p in (path, *path.parents):
        try:
            p.rmdir()
        except OSError:  # not empty (or gone): what is left belongs to someone
            return
        if p == up_to:
            return


@contextmanager
def hold_lock(lock_file: str | Path, hint: str) -> Iterator[None]:
    """Hold `lock_file` exclusively for the body (`fcntl.flock`, without waiting); `RunDirLocked` naming
    the holder and `hint` (what to do) if another process has it. The file says who holds it; it is
    removed on exit, and so are the folders this call created if they are still empty."""
    lock_file = Path(lock_file)
    first_new = _first_missing(lock_file.parent)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = _acquire(lock_file, hint)
    except BaseException:
        if first_new is not None:
            _remove_empty(lock_file.parent, up_to=first_new)
        raise
    try:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {stamp}\n".encode())
        yield
    finally:
        # unlink before unlocking: a process that opened the old file then sees it is stale (_acquire)
        lock_file.unlink(missing_ok=True)
        os.close(fd)
        if first_new is not None:
            _remove_empty(lock_file.parent, up_to=first_new)


def _open_own(path: Path) -> int:
    """`path` opened read-write (created if absent), never through a link: `LockNotAFile` when it is a
    symbolic link, a hard link to another name, or not a regular file, since the holder truncates and
    writes it."""
    why = "a symbolic link"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    else:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
        os.close(fd)
        why = "a hard link to another file" if stat.S_ISREG(st.st_mode) else "not a regular file"
    raise LockNotAFile(
        f"{path}: the lock file is {why}; a lock never writes through one (it would overwrite what it "
        "points at). Remove it (no fp8rl process makes one) and run again"
    )


def _acquire(path: Path, hint: str) -> int:
    """An open descriptor of `path` holding its exclusive flock; `RunDirLocked` if another process has it."""
    while True:
        fd = _open_own(path)
        if os.environ.get(NO_FLOCK_ENV) == "1":
            return fd  # no lock: the holder file is still written, for whoever looks
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace").strip() or "a process that has not said who"
            os.close(fd)
            raise RunDirLocked(
                f"{path.parent}: already in use by another writer ({holder}; lock file {path}); {hint}"
            ) from None
        except OSError as exc:  # ENOSYS, EOPNOTSUPP, ENOLCK, EINVAL: the filesystem has no flock
            empty = os.fstat(fd).st_size == 0  # no holder ever wrote it: ours to remove
            os.close(fd)
            if empty:
                path.unlink(missing_ok=True)
            raise LockUnsupported(
                f"{path}: the filesystem refuses flock ({exc.strerror or exc}); on Lustre mount with "
                f"`-o flock` (not `localflock`: that locks per node only), or set {NO_FLOCK_ENV}=1 to run "
                "without the lock when the scheduler alone keeps one writer per run directory"
            ) from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return fd
        os.close(fd)  # the holder removed this file as we locked it: lock the new one
