"""Every test process starts in the numerics mode the environment asks for (the pinned, reproducible
kernel path by default): `import fp8rl` applies it before any test module runs a torch kernel."""

import fp8rl  # noqa: F401
