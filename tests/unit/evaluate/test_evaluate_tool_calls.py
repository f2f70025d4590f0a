"""The AST tool-call scorer: correct calls in both styles, every kind of wrong call, and that model
output is parsed, never run."""

from pathlib import Path

import pytest

from fp8rl.evaluate.tool_calls import load_tools, parse_call, score_response

TOOLS = load_tools(Path(__file__).parents[3] / "evals" / "agent" / "tools.yaml")
GOLD = {"name": "calc", "arguments": {"op": "add", "a": 12, "b": 45}}


@pytest.mark.parametrize(
    "text",
    ["calc(add,12,45)", " calc(add, 12, 45)\n", 'calc(op="add", a=12, b=45)', "calc('add', b=45, a=12)"],
)
def test_correct_calls_in_positional_and_keyword_style(text):
    s = score_response(text, GOLD, TOOLS)
    assert (s.parsed, s.name, s.exact) == (True, True, True), s.reason


@pytest.mark.parametrize(
    ("text", "parsed", "name", "reason"),
    [
        ("calc(add,12,46)", True, True, "parameter 'b': 46 instead of 45"),
        ("calc(sub,12,45)", True, True, "parameter 'op'"),
        ("calc(div,12,45)", True, True, "not in"),
        ("calc(add,12)", True, True, "missing parameter 'b'"),
        ("calc(add,12,45,c=1)", True, True, "unknown parameter c"),
        ("calc(add,12.0,45)", True, True, "is not int"),
        ("calc(add,True,45)", True, True, "is not int"),
        ("add(12,45)", True, False, "function 'add'"),
        ("calc(add,12,45", False, False, "syntax"),
        ("57", False, False, "not a call"),
        ("", False, False, "syntax"),
        ("calc(add,1+2,45)", False, False, "not a literal"),
        ("calc(add,a,45)", False, False, "not a literal"),
        ("calc(add,12,45,7)", False, False, "more"),
        ("calc(add,12,45)(1)", False, False, "plain function name"),
        ("os.system('x')", False, False, "plain function name"),
    ],
)
def test_wrong_calls_score_zero_with_a_reason(text, parsed, name, reason):
    s = score_response(text, GOLD, TOOLS)
    assert not s.exact
    assert (s.parsed, s.name) == (parsed, name)
    assert reason in s.reason


def test_negative_literal_and_keyword_bare_word():
    gold = {"name": "calc", "arguments": {"op": "sub", "a": -5, "b": 3}}
    assert score_response("calc(sub,-5,3)", gold, TOOLS).exact
    assert score_response("calc(op=sub,a=-5,b=3)", gold, TOOLS).exact


def test_model_output_is_never_executed(tmp_path):
    target = tmp_path / "pwned"
    attacks = [
        f"calc(add, open({str(target)!r}, 'w').write('x'), 45)",
        f"__import__('pathlib').Path({str(target)!r}).touch()",
        f"calc(add, [open({str(target)!r}, 'w')], 45)",
    ]
    for text in attacks:
        assert not score_response(text, GOLD, TOOLS).exact
    assert not target.exists()


def test_parse_call_binds_positional_arguments_in_declared_order():
    assert parse_call("calc(mul,3,4)", TOOLS) == {"name": "calc", "arguments": {"op": "mul", "a": 3, "b": 4}}
    # an unknown function keeps its positional arguments by position
    assert parse_call("other(1,x)", TOOLS) == {"name": "other", "arguments": {"_0": 1, "_1": "x"}}


def test_bad_tools_file_names_the_file_and_entry(tmp_path):
    bad = tmp_path / "tools.yaml"
    bad.write_text("tools:\n  - name: calc\n    params: [{name: a, type: complex}]\n")
    with pytest.raises(ValueError, match=r"tools\.yaml: tools\[0\]\.params\[0\]"):
        load_tools(bad)


@pytest.mark.parametrize(
    "text",
    [
        "calc(add," + "-" * 500 + "1,45)",  # RecursionError in the literal walk
        "calc(add," + "-" * 100_000 + "1,45)",  # MemoryError in the parser
        "calc(add," + "(" * 300 + "12" + ")" * 300 + ",45)",
        "calc(add,12,\x0045)",
    ],
    ids=["500-unary", "100k-unary", "nested-parens", "null-byte"],
)
def test_pathological_output_is_unparsable_not_a_crash(text):
    s = score_response(text, GOLD, TOOLS)
    assert (s.parsed, s.exact) == (False, False)
