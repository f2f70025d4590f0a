"""lm-eval hooks of the tool_call task: score each generated call by its syntax tree (never run it)."""

from pathlib import Path

from fp8rl.evaluate.tool_calls import load_tools, score_response

TOOLS = load_tools(Path(__file__).with_name("tools.yaml"))


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    score = score_response(results[0], doc["call"], TOOLS)
    return {
        "ast_accuracy": float(score.exact),
        "name_accuracy": float(score.name),
        "parse_rate": float(score.parsed),
    }
