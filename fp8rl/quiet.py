"""Quiet output: two known, harmless log lines of third-party imports dropped on every `fp8rl` command
(`install`), and progress bars written to a log file as lines (`progress_as_lines`).

`transformers` imports `torchao` whenever it is installed (its torchao quantizer is registered at import
of `LlamaForCausalLM`), and importing `torchao` prints

- `Failed to load .../torchao/_C_*.so: ...` (logger `torchao`) for the optional C++/CUDA kernels built
  for another Python or for SM90 GPUs, which fp8rl never calls (it uses torchao's pure-Python
  `AdamWFp8` only), and
- `<enum ...> is an Enum subclass ... register_constant() on Enum subclasses is deprecated` (logger
  `torch.utils._pytree`), torchao registering its enums with an API newer torch deprecates.

Both appeared at the top of every command and every DAG log. `install()` adds a logging filter to
exactly those two loggers that drops records matching those two messages; any other warning of
torchao or torch still shows. It imports neither library, so it costs nothing on fast commands.

A progress bar (tqdm's, as lm-eval, datasets and transformers draw them) redraws one terminal line with
carriage returns; in a DAG job's log file every redraw stays, one long line of `\r`-joined states.
lm-eval asks for its bars explicitly (`disable=False`), so neither `TQDM_DISABLE` nor tqdm's
`disable=None` (off where the stream is not a terminal) turns them off. `progress_as_lines()` routes
`sys.stderr` through `ProgressLines` while the stream is not a terminal: a bar's redraws are dropped and
its state is written as a plain line at most once a minute and when the bar ends, so a log holds one
line per finished bar (e.g. `Running loglikelihood requests: 100%|...| 400/400`) and a long one a
heartbeat; other text passes unchanged.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

# (logger name, message pattern) of each silenced record; nothing else is filtered.
SILENCED = (
    ("torchao", re.compile(r"^Failed to load .*\.so\b")),
    ("torch.utils._pytree", re.compile(r"is an Enum subclass .*register_constant\(\) on Enum subclasses")),
)


class _DropMatching(logging.Filter):
    def __init__(self, pattern: re.Pattern[str]) -> None:
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def install() -> None:
    """Add the filters (idempotent: a logger gets at most one of them)."""
    for name, pattern in SILENCED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMatching) for f in logger.filters):
            logger.addFilter(_DropMatching(pattern))


class ProgressLines(io.TextIOBase):
    """A text stream over `stream` that writes what a terminal would keep: text after a carriage
    return replaces the line's earlier text, and a line is written when it ends (newline) or, while it
    is being redrawn, at most every `interval` seconds. Blank lines of a cleared bar are dropped."""

    def __init__(self, stream: TextIO, interval: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.stream, self.interval, self.clock = stream, interval, clock
        self.line = ""
        self.last = clock()

    @property
    def encoding(self) -> str:  # tqdm draws Unicode bars only on a stream that says it can take them
        return getattr(self.stream, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        for part in re.split(r"(\r|\n)", text):
            if part == "\n":
                self._emit()
            elif part == "\r":
                if self.clock() - self.last >= self.interval:
                    self._emit()
                self.line = ""
            else:
                self.line += part
        return len(text)

    def _emit(self) -> None:
        if self.line.strip():
            self.stream.write(self.line.rstrip() + "\n")
            self.last = self.clock()
        self.line = ""

    def flush(self) -> None:
        self.stream.flush()

    def end(self) -> None:
        """Write the unfinished line, if any."""
        self._emit()
        self.flush()


@contextlib.contextmanager
def progress_as_lines(interval: float = 60.0) -> Iterator[None]:
    """Within the block, `sys.stderr` is a `ProgressLines` over itself when it is not a terminal
    (a log file); on a terminal the bars draw as usual."""
    if sys.stderr.isatty():
        yield
        return
    lines = ProgressLines(sys.stderr, interval)
    try:
        with contextlib.redirect_stderr(lines):
            yield
    finally:
        lines.end()
