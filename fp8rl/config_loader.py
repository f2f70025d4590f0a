"""Read an experiment YAML into `ExperimentConfig`, with errors a person can act on.

Every problem becomes a `ConfigError` whose lines name the file, the YAML line where known, the dotted
key path and, for an unknown key or value, the allowed ones. The CLI prints it and exits 2.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fp8rl.config import ExperimentConfig


class ConfigError(Exception):
    """A config that cannot be used; `str()` is the full, printable message."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        head = f"{source}: invalid config ({len(problems)} problem{'s' if len(problems) != 1 else ''})"
        super().__init__("\n".join([head, *(f"  - {p}" for p in problems)]))


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Parse and validate a config file; `overrides` are `dotted.key=yaml_value` strings applied on top."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), [f"file not found: {path}"])
    text = path.read_text()
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [f"{where}invalid YAML: {problem}"]) from None
    lines = _key_lines(node) if node is not None else {}
    return validate_config(data, source=str(path), lines=lines, overrides=overrides)


def validate_config(
    data: Any,
    *,
    source: str = "<config>",
    lines: Mapping[tuple, int] | None = None,
    overrides: Iterable[str] = (),
) -> ExperimentConfig:
    """Validate an already-parsed mapping (the Snakefile passes its `config` dict here)."""
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the top level must be a mapping of keys, got {type(data).__name__}"])
    data = apply_overrides(data, overrides, source)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err, lines or {}) for err in exc.errors()]) from None


def apply_overrides(data: dict, overrides: Iterable[str], source: str = "<config>") -> dict:
    """Return a copy of `data` with each `a.b.c=value` set (value parsed as YAML)."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(source, [f"override {item!r} is not of the form key.path=value"])
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(source, [f"override {item!r}: {part!r} is not a mapping"])
            node = nxt
        node[parts[-1]] = value
    return data


# ---------------------------------------------------------------------------------------- internals


def _key_lines(node: yaml.Node, prefix: tuple = ()) -> dict[tuple, int]:
    """Map every key path in a composed YAML tree to its 1-based line."""
    out: dict[tuple, int] = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            out.update(_key_lines(value_node, path))
            out[path] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_key_lines(item, (*prefix, i)))
    return out


def _line_for(loc: tuple, lines: Mapping[tuple, int]) -> int | None:
    for n in range(len(loc), 0, -1):
        key = tuple(str(p) if isinstance(p, str) else p for p in loc[:n])
        if key in lines:
            return lines[key]
    return None


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete classes a field annotation can hold (through Optional, list, dict, Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return [c for a in typing.get_args(annotation) for c in _unwrap(a)]
    if origin is dict:
        return _unwrap(typing.get_args(annotation)[1])
    return [annotation]


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class that holds the key at `loc` (for listing allowed keys)."""
    model: type[BaseModel] | None = ExperimentConfig
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # a list index or a dict key: stay on the element type
        models = [c for c in _unwrap(field.annotation) if isinstance(c, type) and issubclass(c, BaseModel)]
        model = models[0] if models else None
    return model


def _describe(err: dict, lines: Mapping[tuple, int]) -> str:
    loc = tuple(p for p in err["loc"] if p not in ("function-after", "function-before"))
    msg = err["msg"].removeprefix("Value error, ")
    if not loc and ": " in msg and " " not in msg.split(": ", 1)[0]:
        # a whole-config check whose message starts with the key path it is about
        head, msg = msg.split(": ", 1)
        loc = tuple(int(p) if p.isdigit() else p for p in head.split("."))
    key = ".".join(str(p) for p in loc) or "(top level)"
    line = _line_for(loc, lines)
    where = f"line {line}: " if line else ""
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see `fp8rl config schema`"
        return f"{where}{key}: unknown key; allowed keys here: {allowed}"
    if kind == "literal_error":
        return f"{where}{key}: {err['input']!r} is not allowed; allowed: {err['ctx']['expected']}"
    if kind == "missing":
        return f"{where}{key}: required key is missing"
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) or kind == "value_error" else f" (got {got!r})"
    return f"{where}{key}: {msg}{shown}"
