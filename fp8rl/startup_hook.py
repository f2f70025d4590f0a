"""The OpenBLAS core pin set when the interpreter starts, so `import torch` (or numpy) before `import fp8rl`
keeps the reproducible numerics.

OpenBLAS chooses its kernels once, when numpy first loads it, from `OPENBLAS_CORETYPE`; torch and pandas
import numpy. A script that imports either before fp8rl would load the machine's kernels (SkylakeX on an
AVX-512 CPU) and reproducible mode would refuse to run (fp8rl.pinned_blas). The other pins of
fp8rl.numerics are read later, when their library first computes, so `import fp8rl` still sets them in
time (tested: the same bits in either import order).

`install()` writes `fp8rl-numerics.pth` into the environment's site-packages. Python runs a `.pth` file's
`import` line at every interpreter start (the `site` module), before any user code: the line sets
`OPENBLAS_CORETYPE=Haswell` unless the environment asks for `FP8RL_NUMERICS=fast` or already sets a core
type. It imports nothing but `os`. `make install` runs it (`python -m fp8rl.startup_hook`); an
environment made another way gets it from the same command. Without it, `import fp8rl` first (or the
variable in the environment) is still enough.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

PTH_NAME = "fp8rl-numerics.pth"


def pth_line() -> str:
    """The `.pth` file's single line: executed by `site` at interpreter start."""
    from fp8rl.numerics import DEFAULT_MODE, ENV_MODE, PINNED_ENV

    return (
        f"import os; os.environ.get({ENV_MODE!r}, {DEFAULT_MODE!r}) == 'fast' or "
        f"os.environ.setdefault('OPENBLAS_CORETYPE', {PINNED_ENV['OPENBLAS_CORETYPE']!r})\n"
    )


def site_dir() -> Path:
    """This environment's site-packages (where `site` reads `.pth` files)."""
    return Path(sysconfig.get_paths()["purelib"])


def install(directory: Path | None = None) -> Path:
    """Write the hook into `directory` (this environment's site-packages by default), atomically."""
    directory = Path(directory) if directory is not None else site_dir()
    target = directory / PTH_NAME
    fd, tmp = tempfile.mkstemp(prefix=f".{PTH_NAME}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(pth_line())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def installed(directory: Path | None = None) -> bool:
    target = (Path(directory) if directory is not None else site_dir()) / PTH_NAME
    return target.is_file() and target.read_text(encoding="utf-8") == pth_line()


def main() -> int:
    path = install()
    print(
        f"fp8rl: {path} sets OPENBLAS_CORETYPE at interpreter start (reproducible numerics in any import order)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
