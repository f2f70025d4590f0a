"""Drop two known, harmless log lines that third-party imports print on every `fp8rl` command.

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
"""

from __future__ import annotations

import logging
import re

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
