"""The `fp8rl.config` package: callers import every name from the package, its modules import one way
(base first, the whole file last), and no section declares a field twice (a second declaration silently
replaces the first's bounds while keeping its place in the schema)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel

import fp8rl.config

PACKAGE = Path(fp8rl.config.__file__).parent
# The package's modules in import order: each may import only the ones before it.
ORDER = [
    "base",
    "models",
    "algorithms",
    "precision",
    "training",
    "evaluation",
    "acceptance",
    "failure_search",
    "infrastructure",
    "limits",
    "matrix",
    "runs",
    "study",
    "experiment",
    "resolved",
]
# What the config may import from the rest of fp8rl (rl.bounds: a resolved run's fixed clip interval).
OUTSIDE = {"fp8rl.vocabulary", "fp8rl.rl.bounds"}


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text()) for p in sorted(PACKAGE.glob("*.py")) if p.stem != "__init__"}


def test_order_lists_every_module():
    assert sorted(_modules()) == sorted(ORDER)


@pytest.mark.parametrize("name", ORDER)
def test_modules_import_one_way(name):
    tree = _modules()[name]
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m.split(".")[0] == "fp8rl"}
    inside = {m.removeprefix("fp8rl.config.") for m in ours if m.startswith("fp8rl.config.")}
    assert inside <= set(ORDER[: ORDER.index(name)]), f"fp8rl/config/{name}.py imports {sorted(inside)}"
    assert "fp8rl.config" not in ours, f"fp8rl/config/{name}.py imports the package it is part of"
    assert ours - {f"fp8rl.config.{m}" for m in inside} <= OUTSIDE, f"fp8rl/config/{name}.py: {ours}"


def test_every_public_name_is_exported_by_the_package():
    """`from fp8rl.config import X` works for every public name a module of the package defines."""
    for name, tree in _modules().items():
        module = getattr(fp8rl.config, name)
        defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
        defined |= {
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign | ast.AnnAssign)
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name)
        }
        for public in sorted(d for d in defined if not d.startswith("_")):
            assert public in fp8rl.config.__all__, f"fp8rl/config/{name}.py: {public} is not re-exported"
            assert getattr(fp8rl.config, public) is getattr(module, public)
    assert all(hasattr(fp8rl.config, n) for n in fp8rl.config.__all__)


def test_every_section_declares_each_field_once():
    for name, tree in _modules().items():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            fields = [
                n.target.id
                for n in cls.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ]
            twice = sorted({f for f in fields if fields.count(f) > 1})
            assert not twice, f"fp8rl/config/{name}.py: {cls.name} declares {twice} more than once"


def test_exported_models_are_the_ones_the_experiment_is_built_from():
    """The re-exported classes are the very classes `ExperimentConfig`'s fields hold (no stale copy)."""
    fields = fp8rl.config.ExperimentConfig.model_fields
    assert fields["fp8"].annotation is fp8rl.config.FP8Config
    assert fields["matrix"].annotation is fp8rl.config.MatrixConfig
    assert fields["tracking"].annotation is fp8rl.config.TrackingConfig
    models = [getattr(fp8rl.config, n) for n in fp8rl.config.__all__]
    assert all(
        issubclass(m, fp8rl.config.Strict) for m in models if isinstance(m, type) and issubclass(m, BaseModel)
    )
