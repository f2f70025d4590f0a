"""No import cycle among fp8rl's modules: no module needs, at any point of its code, a module that needs it.

`module_imports` reads, with `ast`, the fp8rl modules each module imports anywhere in its code: at top
level, under a module-level `if`, `try` or `with`, and inside functions and methods (a lazy import is an
arrow of the graph like any other: it only hides a cycle until a caller loads the modules in the wrong
order); those under `if TYPE_CHECKING:` are left out (they never run). `from pkg import name` counts as an
import of `pkg.name` where that is a module and of `pkg` (its `__init__`) otherwise. The second test loads
every module, one fresh interpreter each, to catch what the reading misses.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "fp8rl"


def module_name(path: Path) -> str:
    """`fp8rl/adapters/verl_run.py` -> `fp8rl.adapters.verl_run`; a package's `__init__.py` -> the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt]):
    """Every import statement of a module with this body, at any depth, those under `if TYPE_CHECKING:`
    left out."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _imports([child])
                else:
                    yield from _imports([n for n in ast.walk(child) if isinstance(n, ast.stmt)])


def module_imports() -> dict[str, set[str]]:
    """fp8rl module -> the fp8rl modules it imports anywhere in its code (module docstring)."""
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in paths}
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{a.name}" for a in node.names} & paths.keys()
            found |= submodules
            if source in paths and len(submodules) < len(node.names):
                found.add(source)
        graph[name] = found - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as the list of its modules, the first repeated at the end; None if it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_module_imports_reads_every_import_but_type_checking_ones():
    graph = module_imports()
    assert "fp8rl.adapters.verl_model" in graph["fp8rl.adapters.verl_sizing"]
    # `from fp8rl.fp8 import fastgemm` is an import of the submodule, not of the package's __init__
    assert "fp8rl.fp8.fastgemm" in graph["fp8rl.fp8.linear"]
    assert "fp8rl.fp8" not in graph["fp8rl.fp8.linear"]
    # fp8rl.commands.verl imports the adapters inside its handlers only: they count
    assert any(m.startswith("fp8rl.adapters") for m in graph["fp8rl.commands.verl"])


def test_module_imports_counts_function_level_imports_and_skips_type_checking(tmp_path, monkeypatch):
    pkg = tmp_path / "fp8rl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fp8rl import c\n"
        "def f():\n    from fp8rl import b\n"
    )
    (pkg / "b.py").write_text("class K:\n    def m(self):\n        import fp8rl.a\n")
    (pkg / "c.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    graph = module_imports()
    assert graph["fp8rl.a"] == {"fp8rl.b"} and graph["fp8rl.b"] == {"fp8rl.a"}
    assert find_cycle(graph) == ["fp8rl.a", "fp8rl.b", "fp8rl.a"]


def test_no_import_cycle_among_fp8rl_modules():
    cycle = find_cycle(module_imports())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Each module in a fresh interpreter of its own would cost a torch import each (minutes on a shared
# machine); one interpreter that drops every fp8rl module before loading the next is as fresh for
# fp8rl's own imports, which are what a cycle breaks.
PROBE = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "fp8rl" or m.startswith("fp8rl.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "fp8rl":
            failed[name] = repr(exc)
    except ImportError as exc:
        failed[name] = repr(exc)
print(json.dumps(failed))
"""


@pytest.mark.slow
def test_every_module_loads_first_in_a_fresh_interpreter():
    """A module whose third-party import is not installed here (verl, lm_eval) is passed over; an
    ImportError from fp8rl itself (a name from a half-loaded module) fails."""
    names = sorted(module_imports())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(names)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}
