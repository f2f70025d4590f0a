"""Every config key says what it does: `fp8rl config schema` prints `ExperimentConfig.model_json_schema()`,
whose field descriptions and section docstrings are the user's reference for the YAML keys."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from fp8rl.config import ExperimentConfig, ScheduleConfig


def _models_in(annotation: Any, key: str) -> Iterator[tuple[type[BaseModel], str]]:
    """The section models inside a field's annotation (through `X | None`, `list[X]`, `dict[str, X]`),
    each with the dotted key its fields hang under (`[]` for a list's items, `.*` for a mapping's values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, key
        return
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is dict and len(args) == 2:
        yield from _models_in(args[1], f"{key}.*")
        return
    if origin in (list, tuple, set, frozenset):
        key = f"{key}[]"
    for arg in args:
        yield from _models_in(arg, key)


def _walk(cls: type[BaseModel], prefix: str, seen: set[type[BaseModel]]) -> Iterator[tuple[str, str]]:
    """('field', key) for every field reachable from `cls` without a description, except fields typed
    directly as a section model (its class docstring describes them), and ('class', key) for every
    reachable section model without a docstring of its own."""
    if cls in seen:
        return
    seen.add(cls)
    if not inspect.cleandoc(cls.__dict__.get("__doc__") or ""):
        yield "class", f"{prefix or '<root>'} ({cls.__name__})"
    for name, field in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        annotation = field.annotation
        section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if not section and not (field.description or "").strip():
            yield "field", key
        for model, sub in _models_in(annotation, key):
            yield from _walk(model, sub, seen)


def test_every_key_is_described():
    """Every field reachable from `ExperimentConfig` (through sections, lists, optionals and mappings) has
    a non-empty `description=`, except a field typed directly as a section model, whose class must have a
    docstring; every reachable section model has a docstring."""
    missing = list(_walk(ExperimentConfig, "", set()))
    fields = [key for kind, key in missing if kind == "field"]
    classes = [key for kind, key in missing if kind == "class"]
    assert not missing, (
        f"{len(fields)} config key(s) without a description: {', '.join(fields) or 'none'}; "
        f"{len(classes)} section(s) without a docstring: {', '.join(classes) or 'none'}"
    )


def test_schema_carries_descriptions():
    """The JSON schema `fp8rl config schema` prints holds a leaf key's description and a section's
    docstring (`schedule.ppo_epochs`, `ScheduleConfig`)."""
    schema = ExperimentConfig.model_json_schema()
    section = schema["$defs"]["ScheduleConfig"]
    described = section["properties"]["ppo_epochs"].get("description", "")
    assert described and described == ScheduleConfig.model_fields["ppo_epochs"].description
    assert section.get("description", "").strip()
