"""Read an experiment YAML into `ExperimentConfig`, with errors a person can act on.

Every problem becomes a `ConfigError` whose lines name the file, the YAML line where known (or, for a
value a `--set KEY=VALUE` override put there, that override), the dotted key path and, for an unknown
key or value, the allowed ones. The CLI prints it and exits 2. Every config
read here is also held to the bounds of fp8rl.config.limits (a value past one names the key and the
bound, and how to raise it).
"""

from __future__ import annotations

import shlex
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fp8rl.config import ExperimentConfig, limit_problems


class ConfigError(Exception):
    """A config that cannot be used; `str()` is the full, printable message."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        head = f"{source}: invalid config ({len(problems)} problem{'s' if len(problems) != 1 else ''})"
        super().__init__("\n".join([head, *(f"  - {p}" for p in problems)]))


# A check beyond the schema (e.g. what a task needs of the model): `(key path, message)` per problem.
Check = Callable[[ExperimentConfig], list[tuple[tuple, str]]]


def load_config(
    path: str | Path, overrides: Iterable[str] = (), checks: Iterable[Check] = ()
) -> ExperimentConfig:
    """Parse and validate a config file; `overrides` are `dotted.key=yaml_value` strings applied on top,
    `checks` run on the validated config and report like schema errors (with the key's line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), [f"file not found: {path}"])
    node, data = parse_yaml(path)
    lines = key_lines(node) if node is not None else {}
    return validate_config(data, source=str(path), lines=lines, overrides=overrides, checks=checks)


def parse_yaml(path: Path) -> tuple[yaml.Node | None, Any]:
    """`(composed tree, data)` of a YAML file that is safe to walk: UTF-8 text, no key twice in one
    mapping, and aliases that neither refer to themselves nor expand the tree past `MAX_NODES` nodes
    (a "billion laughs" file would otherwise take minutes and gigabytes to walk or validate)."""
    source = str(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise ConfigError(
            source, [f"line {line}: not UTF-8 text (byte 0x{bad} at offset {exc.start})"]
        ) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot be read: {exc.strerror or exc}"]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [f"{where}invalid YAML: {problem}"]) from None
    except RecursionError:
        raise ConfigError(source, ["invalid YAML: nested too deeply"]) from None
    if node is None:
        return None, None
    problems = _tree_problems(node)
    if problems:
        raise ConfigError(source, problems)
    return node, yaml.SafeLoader(text).construct_document(node)


def validate_config(
    data: Any,
    *,
    source: str = "<config>",
    lines: Mapping[tuple, int] | None = None,
    overrides: Iterable[str] = (),
    checks: Iterable[Check] = (),
    override_flag: str = "--set",
) -> ExperimentConfig:
    """Validate an already-parsed mapping (the Snakefile passes its config files' merged mapping here,
    with its `--config` entries as `overrides`); a problem a `key.path=value` override caused names it
    after `override_flag`, the option it came from."""
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the top level must be a mapping of keys, got {type(data).__name__}"])
    overrides = list(overrides)
    data = apply_overrides(data, overrides, source)
    where = _Where(lines or {}, override_keys(overrides), override_flag)
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(err, where) for err in exc.errors()]) from None
    problems = [
        _describe({"loc": loc, "msg": msg, "type": "value_error"}, where)
        for check in (limit_problems, *checks)  # the bounds (fp8rl.config.limits): every config, always
        for loc, msg in check(cfg)
    ]
    if problems:
        raise ConfigError(source, problems)
    return cfg


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


# Snakemake's `--config` entry whose value is fp8rl's own dotted overrides (Snakemake refuses a dotted
# name such as `eval.limit` itself, before the Snakefile runs).
SET_ENTRY = "set"


def snakemake_overrides(entries: Mapping[str, Any], source: str = "--config") -> list[str]:
    """Snakemake's `--config` entries (already parsed by Snakemake) as `key.path=value` overrides, the
    form `fp8rl --set` takes. `set=KEY=VALUE` passes fp8rl's dotted keys through (several:
    `set='eval.limit=20 schedule.steps=3'`, split as a shell splits words); any other entry `name=value`
    sets that top-level key, and a YAML mapping value (`eval='{limit: 20}'`) sets each key under it.
    Snakemake reads nested values as strings; a number, boolean or null among them gets its YAML type
    back, any other string stays as written (a path with `#` or `: ` in it is not re-read as YAML)."""
    out = []
    for name, value in entries.items():
        if name == SET_ENTRY:
            out += _set_entry(value, source)
        else:
            out += [f"{key}={_yaml_text(leaf)}" for key, leaf in _leaves(str(name), value)]
    return out


def _set_entry(value: Any, source: str) -> list[str]:
    """The overrides of a `set=...` entry: a string of `KEY=VALUE` words, a list of them, or a mapping."""
    if isinstance(value, str):
        try:
            items = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(source, [f"{SET_ENTRY}={value}: {exc}"]) from None
    elif isinstance(value, list):
        items = [str(v) for v in value]
    elif isinstance(value, Mapping):
        items = [f"{k}={v if isinstance(v, str) else _yaml_text(v)}" for k, v in value.items()]
    else:
        items = [str(value)]
    bad = [item for item in items if "=" not in item or not item.partition("=")[0]]
    if bad or not items:
        raise ConfigError(
            source, [f"{SET_ENTRY}={value!s}: expected KEY=VALUE overrides, e.g. {SET_ENTRY}=eval.limit=20"]
        )
    return items


def _leaves(key: str, value: Any) -> list[tuple[str, Any]]:
    """`(dotted key, value)` of every leaf under a `--config` entry; lists and scalars are leaves."""
    if isinstance(value, Mapping) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)]
    return [(key, _retyped(value))]


def _retyped(value: Any) -> Any:
    """A Snakemake-parsed value with the numbers, booleans and nulls of its strings typed as YAML types them."""
    if isinstance(value, Mapping):
        return {str(k): _retyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_retyped(v) for v in value]
    if not isinstance(value, str):
        return value
    try:
        typed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(typed, (bool, int, float)) or (typed is None and value.strip() in _NULLS):
        return typed
    return value


_NULLS = ("~", "null", "Null", "NULL")


def _yaml_text(value: Any) -> str:
    """`value` as one line of YAML that reads back as itself (quoted only where YAML needs it)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def override_keys(overrides: Iterable[str]) -> dict[tuple[str, ...], str]:
    """`{key path: the override that set it}` for `key.path=value` strings (the last one of a key wins,
    as in `apply_overrides`)."""
    return {tuple(item.partition("=")[0].split(".")): item for item in overrides if "=" in item}


# ---------------------------------------------------------------------------------------- internals

MAX_NODES = 10_000  # a real config has a few hundred; aliases may not expand a file past this


def _tree_problems(root: yaml.Node) -> list[str]:
    """Duplicate keys, self-referring aliases and an expanded size over `MAX_NODES`, each with its line.

    Walks every distinct node once (aliases share nodes, so sizes are memoized by identity)."""
    problems: list[str] = []
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, path: str) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise _Unbounded(
                f"line {node.start_mark.line + 1}: {path or '(top level)'}: an alias refers to itself"
            )
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                child = f"{path}.{key}" if path else key
                if key in seen:
                    problems.append(f"line {line}: {child}: duplicate key (first at line {seen[key]})")
                seen.setdefault(key, line)
                total += 1 + size(value_node, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                total += size(item, f"{path}.{i}" if path else str(i))
        if total > MAX_NODES:
            raise _Unbounded(
                f"line {node.start_mark.line + 1}: {path or '(top level)'}: aliases expand the config past "
                f"{MAX_NODES} nodes; write the values out instead"
            )
        open_nodes.discard(id(node))
        sizes[id(node)] = total
        return total

    try:
        size(root, "")
    except _Unbounded as exc:
        return [str(exc)]
    except RecursionError:
        return ["invalid YAML: nested too deeply"]
    return problems


class _Unbounded(Exception):
    pass


def key_lines(node: yaml.Node, prefix: tuple = ()) -> dict[tuple, int]:
    """Map every key path in a composed YAML tree (one `parse_yaml` accepted) to its 1-based line."""
    out: dict[tuple, int] = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            out.update(key_lines(value_node, path))
            out[path] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(key_lines(item, (*prefix, i)))
    return out


class _Where:
    """Where a problem at a key path comes from, as its message's prefix: the override that wrote the key
    or one of its parents (`--set KEY=VALUE: `, or the DAG's `--config KEY=VALUE: `), else the YAML line of the key or of its
    nearest parent in the file (`line N: `), else nothing."""

    def __init__(
        self, lines: Mapping[tuple, int], overrides: Mapping[tuple[str, ...], str], flag: str = "--set"
    ):
        self.lines, self.overrides, self.flag = lines, overrides, flag

    def __call__(self, loc: tuple) -> str:
        for n in range(len(loc), 0, -1):
            if (item := self.overrides.get(tuple(str(p) for p in loc[:n]))) is not None:
                return f"{self.flag} {item}: "
        for n in range(len(loc), 0, -1):
            if (line := self.lines.get(tuple(loc[:n]))) is not None:
                return f"line {line}: "
        return ""


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


def _describe(err: dict, where: _Where) -> str:
    loc = tuple(p for p in err["loc"] if p not in ("function-after", "function-before"))
    msg = err["msg"].removeprefix("Value error, ")
    if not loc and ": " in msg and " " not in msg.split(": ", 1)[0]:
        # a whole-config check whose message starts with the key path it is about
        head, msg = msg.split(": ", 1)
        loc = tuple(int(p) if p.isdigit() else p for p in head.split("."))
    key = ".".join(str(p) for p in loc) or "(top level)"
    where = where(loc)
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
