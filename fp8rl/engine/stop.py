"""A request from outside to stop a run early: SIGTERM, which Slurm sends at a job's time limit (and on
`scancel`) `KillWait` seconds (30 by default) before SIGKILL.

The trainer checks the request after every step: it writes a checkpoint of the step it just finished and
raises `Interrupted` instead of writing summary.json, so the job fails (`fp8rl train` exits 128 + the
signal's number, as a shell reports a process killed by it), Snakemake resubmits it, and the new job
resumes after that step rather than at the last periodic checkpoint (`schedule.checkpoint_every`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(Exception):
    """The run stopped on request after `step` (its checkpoint written); `signum` is the signal's number."""

    def __init__(self, step: int, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step}")
        self.step, self.signum = step, signum


class StopRequest:
    """`signum` is set once a watched signal arrived; the handler does nothing else, so the step in
    progress finishes undisturbed. A request nobody installed (`watch` never entered) never fires."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame) -> None:
        self.signum = signum

    @contextmanager
    def watch(self, *signums: int) -> Iterator[StopRequest]:
        """Catch `signums` (default SIGTERM) while the block runs, then put the previous handlers back.
        Outside the main thread (where Python cannot install handlers) it watches nothing."""
        signums = signums or (signal.SIGTERM,)
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in signums}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
