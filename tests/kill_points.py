"""Kill injection: run a function in a forked child that SIGKILLs itself just before its k-th filesystem
step (a rename, an unlink, a directory exchange, a copy, a tree removal), so a test can look at what a
kill at that instant leaves on disk, for every k in turn.

    k = 1
    while run_killed(fn, k):   # False once fn finished before its k-th step
        check(what is on disk)
        k += 1
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable

import fp8rl.io

# (module, attribute) of every step counted; fp8rl.io.replace_dir calls exchange_dirs through its module
STEPS = (
    (os, "replace"),
    (os, "rename"),
    (os, "unlink"),
    (shutil, "rmtree"),
    (shutil, "copy2"),
    (fp8rl.io, "exchange_dirs"),
)


def _arm(k: int) -> None:
    count, depth = [0], [0]
    for module, name in STEPS:
        real = getattr(module, name)

        def step(*args, _real=real, **kwargs):
            if depth[0] == 0:  # a step inside another (the unlinks of a tree removal) is not one more
                count[0] += 1
                if count[0] == k:
                    os.kill(os.getpid(), signal.SIGKILL)
            depth[0] += 1
            try:
                return _real(*args, **kwargs)
            finally:
                depth[0] -= 1

        setattr(module, name, step)


def run_killed(fn: Callable[[], object], k: int) -> bool:
    """Run `fn()` in a forked child that is SIGKILLed just before its k-th filesystem step. True when it
    was killed; False when `fn` returned before taking k steps. AssertionError if `fn` raised."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        code = 0
        try:
            _arm(k)
            fn()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"the function failed in the child (kill point {k})"
    return False
