"""fp8rl.rl stays independent of the FP8 numerics (docs/architecture.md#pieces-and-layering: `rl` and `fp8` never import each other)."""

from __future__ import annotations

import ast
from pathlib import Path

import fp8rl.rl

RL_DIR = Path(fp8rl.rl.__file__).parent


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_rl_never_imports_fp8_or_the_trainer():
    files = sorted(RL_DIR.glob("*.py"))
    assert len(files) >= 8
    for f in files:
        bad = {n for n in _imports(f) if n.startswith(("fp8rl.fp8", "fp8rl.engine", "fp8rl.adapters"))}
        assert not bad, f"{f.name} imports {bad}"


def test_public_names_are_exported():
    for name in fp8rl.rl.__all__:
        obj = getattr(fp8rl.rl, name)
        # functions and classes, plus the shared constants (upper case, e.g. LOG_RATIO_CLAMP)
        assert callable(obj) or (name.isupper() and isinstance(obj, float | int | tuple)), name
