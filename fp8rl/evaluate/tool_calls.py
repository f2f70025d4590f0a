"""Function-call scoring by syntax tree: parse the model's text with Python's `ast`, never execute it.

A response is scored against the gold call of a `tool_test.jsonl` row (`{"name": ..., "arguments":
{...}}`) and the tool's declared signature (`evals/agent/tools.yaml`). As BFCL's AST checker does, a
call is correct when the function name matches, every required parameter is given, no unknown one is,
each value has the declared type (int, float, str, bool; `enum` restricts the allowed values) and equals
the gold value. Positional arguments bind to parameters in declaration order; a bare identifier (the
`calc(add,12,45)` style of the smoke task) is read as a string for `str` parameters. Only literals are
accepted as values: anything else (names of other kinds, calls, attributes, operators other than a sign)
makes the call unparsable. Nothing the model wrote is ever evaluated.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARAM_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    required: bool = True
    enum: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: its name and parameters in positional order."""

    name: str
    params: tuple[Param, ...] = field(default_factory=tuple)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True)
class CallScore:
    """How one response scored: it parsed as a call, the name matched, the whole call matched."""

    parsed: bool
    name: bool
    exact: bool
    reason: str = ""


class UnparsableCall(ValueError):
    """The text is not one literal-argument function call."""


def load_tools(path: str | Path) -> dict[str, ToolSpec]:
    """Read tool signatures from YAML: `tools: [{name, params: [{name, type, required?, enum?}]}]`.
    A ValueError names the file and the entry that is wrong."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise ValueError(f"{path}: expected a mapping with a `tools` list")
    tools: dict[str, ToolSpec] = {}
    for i, entry in enumerate(data["tools"]):
        where = f"{path}: tools[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"{where}: each tool needs a `name`")
        params = []
        for j, p in enumerate(entry.get("params") or []):
            if not isinstance(p, dict) or "name" not in p or p.get("type") not in PARAM_TYPES:
                raise ValueError(
                    f"{where}.params[{j}]: needs `name` and `type` (one of {', '.join(PARAM_TYPES)})"
                )
            enum = tuple(p["enum"]) if p.get("enum") is not None else None
            params.append(Param(p["name"], p["type"], bool(p.get("required", True)), enum))
        tools[entry["name"]] = ToolSpec(entry["name"], tuple(params))
    return tools


def _literal(node: ast.expr, allow_bare_name: bool) -> Any:
    """The value of a literal argument node; a bare identifier only where a string is expected."""
    if isinstance(node, ast.Name) and allow_bare_name:
        return node.id
    literal = isinstance(node, ast.Constant | ast.List | ast.Tuple | ast.Dict | ast.Set) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd)
    )
    if literal:
        try:
            return ast.literal_eval(node)  # literals only: raises on anything that would run code
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    raise UnparsableCall(f"argument {ast.unparse(node)!r} is not a literal")


def parse_call(text: str, tools: dict[str, ToolSpec]) -> dict:
    """Parse `text` (stripped) as one call: `{"name": str, "arguments": {param: value}}`.

    Raises UnparsableCall when the text is not a single call of a plain function name with literal
    arguments. Positional arguments of a known tool bind to its parameters in order. Pathological text
    (hundreds of chained unary operators, deeply nested brackets) exhausts the parser's recursion or
    memory: that too is an unparsable call, not a crash of the evaluation."""
    try:
        return _parse_call(text, tools)
    except (RecursionError, MemoryError):
        raise UnparsableCall("too deeply nested to parse") from None


def _parse_call(text: str, tools: dict[str, ToolSpec]) -> dict:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        raise UnparsableCall("not valid Python syntax") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise UnparsableCall("not a call of a plain function name")
    name = call.func.id
    spec = tools.get(name)
    args: dict[str, Any] = {}
    for i, node in enumerate(call.args):
        if isinstance(node, ast.Starred):
            raise UnparsableCall("starred arguments are not allowed")
        if spec is None:  # an unknown function: keep its arguments under their positions
            args[f"_{i}"] = _literal(node, allow_bare_name=True)
            continue
        if i >= len(spec.params):
            raise UnparsableCall(f"{name} takes {len(spec.params)} arguments, got more")
        param = spec.params[i]
        args[param.name] = _literal(node, allow_bare_name=param.type == "str")
    for kw in call.keywords:
        if kw.arg is None:
            raise UnparsableCall("**kwargs are not allowed")
        if kw.arg in args:
            raise UnparsableCall(f"parameter {kw.arg!r} given twice")
        param = spec.param(kw.arg) if spec else None
        args[kw.arg] = _literal(kw.value, allow_bare_name=param is None or param.type == "str")
    return {"name": name, "arguments": args}


def _type_ok(value: Any, type_name: str) -> bool:
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, PARAM_TYPES[type_name])


def check_call(call: dict, gold: dict, tools: dict[str, ToolSpec]) -> tuple[bool, str]:
    """Whether a parsed call matches the gold call under the tool's signature; (ok, reason)."""
    if call["name"] != gold["name"]:
        return False, f"function {call['name']!r} instead of {gold['name']!r}"
    spec = tools.get(gold["name"])
    if spec is None:
        return False, f"no signature for tool {gold['name']!r}"
    args, want = call["arguments"], gold["arguments"]
    unknown = sorted(set(args) - {p.name for p in spec.params})
    if unknown:
        return False, f"unknown parameter {', '.join(unknown)}"
    for p in spec.params:
        if p.name not in args:
            if p.required or p.name in want:
                return False, f"missing parameter {p.name!r}"
            continue
        value = args[p.name]
        if not _type_ok(value, p.type):
            return False, f"parameter {p.name!r}: {value!r} is not {p.type}"
        if p.enum is not None and value not in p.enum:
            return False, f"parameter {p.name!r}: {value!r} not in {list(p.enum)}"
        if p.name in want and value != want[p.name]:
            return False, f"parameter {p.name!r}: {value!r} instead of {want[p.name]!r}"
    return True, ""


def score_response(text: str, gold: dict, tools: dict[str, ToolSpec]) -> CallScore:
    """Score one model response against the gold call."""
    try:
        call = parse_call(text, tools)
    except UnparsableCall as exc:
        return CallScore(parsed=False, name=False, exact=False, reason=str(exc))
    ok, reason = check_call(call, gold, tools)
    return CallScore(parsed=True, name=call["name"] == gold["name"], exact=ok, reason=reason)
