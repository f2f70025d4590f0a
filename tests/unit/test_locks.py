"""`RunDir.lock()` and `hold_lock` (fp8rl.locks): one writer per run directory, held by a second process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fp8rl.locks import RunDirLocked
from fp8rl.run_files import RunDir

HOLD = (
    "import sys; from fp8rl.run_files import RunDir\n"
    "with RunDir(sys.argv[1]).lock():\n"
    "    print('held', flush=True); sys.stdin.read()\n"
)


@pytest.fixture
def holder(tmp_path):
    """Start a process that holds `tmp_path/run`'s lock until killed; yields (run dir, process)."""
    root = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "held"
    yield root, proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_second_holder_is_refused_with_the_first_named(holder):
    root, proc = holder
    with pytest.raises(RunDirLocked) as exc, RunDir(root).lock():
        pass
    msg = str(exc.value)
    assert f"pid {proc.pid} on host " in msg and str(root) in msg and "run.lock" in msg
    assert (root / "run.lock").is_file()  # the holder's lock is left as it was


def test_a_killed_holder_releases_the_lock(holder):
    root, proc = holder
    os.kill(proc.pid, signal.SIGKILL)  # no cleanup runs: the lock file stays, the kernel drops the lock
    proc.wait()
    assert (root / "run.lock").is_file()
    with RunDir(root).lock():
        assert f"pid {os.getpid()} " in (root / "run.lock").read_text()
    assert not (root / "run.lock").exists()


def test_the_lock_is_released_on_an_exception_and_leaves_nothing_it_created(tmp_path):
    root = tmp_path / "a" / "b" / "run"
    with pytest.raises(RuntimeError), RunDir(root).lock():
        assert (root / "run.lock").is_file()
        raise RuntimeError("crash")
    assert not (tmp_path / "a").exists()  # the folders it made are gone again: they stayed empty
    with RunDir(root).lock():
        (root / "metrics.jsonl").write_text("")
    assert sorted(p.name for p in root.iterdir()) == ["metrics.jsonl"]  # a run's files stay


def test_one_process_cannot_take_its_own_lock_twice(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.lock(), pytest.raises(RunDirLocked, match=f"pid {os.getpid()}"), RunDir(Path(run.root)).lock():
        pass


def test_a_filesystem_without_flock_is_named_with_the_way_out(tmp_path, monkeypatch):
    """Lustre without `-o flock` answers flock with ENOSYS: the error names the file, the mount option and
    FP8RL_NO_FLOCK; with that set the body runs unlocked and the holder file is still written and removed."""
    import errno

    from fp8rl import locks
    from fp8rl.locks import NO_FLOCK_ENV, LockUnsupported, RunDirLocked
    from fp8rl.run_files import RunDir

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(locks.fcntl, "flock", no_flock)
    run = RunDir(tmp_path / "run")
    with (
        pytest.raises(
            LockUnsupported, match=r"run\.lock: the filesystem refuses flock .*-o flock.*FP8RL_NO_FLOCK=1"
        ),
        run.lock(),
    ):
        pass
    assert issubclass(LockUnsupported, RunDirLocked)  # commands turn it into a clear exit 2 like a held lock
    assert not (tmp_path / "run").exists()  # nothing left behind
    monkeypatch.setenv(NO_FLOCK_ENV, "1")
    with run.lock():
        assert "pid" in run.lock_file.read_text()
    assert not run.lock_file.exists()


def test_two_data_commands_on_one_out_never_mix_their_files(tmp_path, capsys):
    """`fp8rl data` holds OUT/.data.lock like train/eval/report/publish: a second one exits 2 naming the
    holder, and the first leaves no lock behind."""
    from fp8rl.cli import main
    from fp8rl.commands.data import DATA_LOCK
    from fp8rl.locks import hold_lock

    smoke = Path(__file__).resolve().parents[2] / "config" / "smoke.yaml"
    out = tmp_path / "data"
    args = ["data", "--config", str(smoke), "--out", str(out), "--set", "task.n_train=50"]
    with hold_lock(out / DATA_LOCK, "test"):
        assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--out {out}:" in err and "pid " in err
    assert not (out / "train.jsonl").exists()
    assert main(args) == 0 and (out / "train.jsonl").is_file() and not (out / DATA_LOCK).exists()


def _planted(kind: str, lock: Path, victim: Path) -> None:
    victim.write_text("precious\n")
    lock.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        lock.symlink_to(victim)
    elif kind == "dangling symlink":
        victim.unlink()
        lock.symlink_to(victim)
    elif kind == "hard link":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "hard link", "fifo"])
def test_a_lock_never_writes_through_a_planted_link(tmp_path, kind):
    """A link planted at a lock path would have the next holder truncate and overwrite its target: the
    lock is refused (a RunDirLocked, so commands exit 2) naming the path, and the target is untouched."""
    from fp8rl.locks import LockNotAFile, hold_lock

    lock, victim = tmp_path / "run" / "run.lock", tmp_path / "victim.txt"
    _planted(kind, lock, victim)
    with pytest.raises(LockNotAFile, match=r"run\.lock: the lock file is") as exc, hold_lock(lock, "hint"):
        pass
    assert isinstance(exc.value, RunDirLocked)
    if kind == "dangling symlink":
        assert not victim.exists()  # not created through the link
    elif kind != "fifo":
        assert victim.read_text() == "precious\n"
    assert lock.is_symlink() or lock.exists()  # left for the user to look at


def test_data_refuses_a_link_at_its_lock(tmp_path, capsys):
    from fp8rl.cli import main
    from fp8rl.commands.data import DATA_LOCK

    smoke = Path(__file__).resolve().parents[2] / "config" / "smoke.yaml"
    out = tmp_path / "data"
    _planted("symlink", out / DATA_LOCK, tmp_path / "victim.txt")
    assert main(["data", "--config", str(smoke), "--out", str(out), "--set", "task.n_train=50"]) == 2
    assert f"{out / DATA_LOCK}: the lock file is a symbolic link" in capsys.readouterr().err
    assert (tmp_path / "victim.txt").read_text() == "precious\n"
    assert not (out / "train.jsonl").exists()
