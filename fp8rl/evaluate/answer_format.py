"""Ask and score lm-eval's math tasks in the format the policy was trained on (`eval.answer_format: dapo`).

DAPO-Math-17k (the paper tier's training set) asks for the answer on the last line as `Answer: X`, and
verl's DAPO scorer reads that line (falling back to the last `\\boxed{}`). lm-eval's own tasks ask and
read otherwise: `gsm8k` five-shot with `#### N`, `minerva_math500` four-shot with `Final Answer: The final
answer is X. I hope it is correct.`, `aime24`/`aime25` zero-shot as `Question: ...\\nAnswer:`, read from
`\\boxed{}` or the text between the first and last `$`. A policy that keeps its training format is scored
wrong by those readers. With `dapo`, each of these tasks is instead asked zero-shot with DAPO-Math's own
instruction around the task's question, stopped only by the model's end of sequence, and scored by
`read_answer` + math-verify against the task's gold answer: one `exact_match` metric per task (an avg@k
task averages it over its k samples). The datasets, their processing and splits stay lm-eval's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from fp8rl.config import ExperimentConfig
from fp8rl.evaluate.eval_tasks import LM_EVAL_ALIASES, EvalInputError

# DAPO-Math-17k's prompt, verbatim, around the problem text.
DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{question}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)
ANSWER_FORMATS = ("task", "dapo")
METRIC = "exact_match"

_MINERVA = re.compile(r"Final Answer: The final answer is (.*?)\. I hope it is correct", re.DOTALL)
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")  # verl's math_dapo pattern


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def read_answer(response: str) -> str | None:
    """The final answer a response states: minerva's `Final Answer: The final answer is X. I hope it is
    correct.`, else the last `Answer: X` line, else the last `\\boxed{X}`; a `\\boxed{}` inside the chosen
    span is unwrapped and `$` delimiters dropped. None when the response states none of them."""
    found = _MINERVA.findall(response) or _ANSWER_LINE.findall(response)
    if found:
        span = found[-1]
        span = last_boxed(span) or span
    else:
        span = last_boxed(response)
    if span is None:
        return None
    span = span.strip().strip("$").strip().rstrip(".").strip()
    return span or None


def equivalent(answer: str, gold: str) -> bool:
    """Whether math-verify finds `answer` equal to `gold` (both read as LaTeX), or their text matches
    once spaces, `$` and thousands separators are removed."""
    from math_verify import parse, verify

    def plain(s: str) -> str:
        return re.sub(r"[\s$]", "", s).replace(",", "") if re.fullmatch(r"[\d,.\s$-]+", s) else s.strip()

    if plain(answer) == plain(gold):
        return True
    parsed_gold, parsed = parse(f"${plain(gold)}$"), parse(f"${plain(answer)}$")
    return bool(parsed_gold and parsed and verify(parsed_gold, parsed))


@dataclass(frozen=True)
class MathTask:
    """Where one lm-eval task keeps its question and its gold answer (after the task's `process_docs`)."""

    question: Callable[[dict], str]
    gold: Callable[[dict], str]


MATH_TASKS: dict[str, MathTask] = {
    "gsm8k": MathTask(lambda d: d["question"], lambda d: d["answer"].rsplit("####", 1)[-1].strip()),
    "minerva_math500": MathTask(lambda d: d["problem"], lambda d: d["answer"]),
    "aime24": MathTask(lambda d: d["Problem"], lambda d: str(d["Answer"])),
    "aime25": MathTask(lambda d: d["problem"], lambda d: str(d["answer"])),
}


@dataclass(frozen=True)
class DapoPrompt:
    """`doc_to_text`: the task's question inside DAPO-Math's instruction."""

    task: MathTask

    def __call__(self, doc: dict) -> str:
        return DAPO_INSTRUCTION.format(question=self.task.question(doc))


@dataclass(frozen=True)
class DapoGold:
    """`doc_to_target`: the task's gold answer (kept in the samples file beside each response)."""

    task: MathTask

    def __call__(self, doc: dict) -> str:
        return self.task.gold(doc)


@dataclass(frozen=True)
class DapoScore:
    """`process_results`: 1 if the response's stated answer (`read_answer`) equals the gold, else 0."""

    task: MathTask

    def __call__(self, doc: dict, results: list) -> dict[str, int]:
        answer = read_answer(results[0])
        return {METRIC: int(answer is not None and equivalent(answer, self.task.gold(doc)))}


def dapo_task(cfg: dict, name: str) -> dict:
    """An lm-eval task config (resolved, as lm-eval's loader returns it) asked and scored in DAPO-Math's
    format; `name` is the config's name for it (errors name `eval.lm_eval_tasks`)."""
    task = MATH_TASKS.get(cfg.get("task"))
    if task is None:
        raise EvalInputError(f"eval.answer_format: {unknown_task(name)} for it")
    out = {
        k: v
        for k, v in cfg.items()
        if k not in ("filter_list", "fewshot_config", "fewshot_split", "description")
    }
    gen = dict(out.get("generation_kwargs") or {})
    gen["until"] = []  # lm-eval adds the model's end of sequence; "Question:" / "Problem:" would cut answers
    return {
        **out,
        "doc_to_text": DapoPrompt(task),
        "doc_to_target": DapoGold(task),
        "process_results": DapoScore(task),
        "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True}],
        "num_fewshot": 0,
        "target_delimiter": "",
        "generation_kwargs": gen,
    }


def answer_format_problems(cfg: ExperimentConfig) -> list[tuple[tuple, str]]:
    """A config check (`load_config(checks=...)`): with `answer_format: dapo`, every lm-eval task is one
    whose question and answer fields `MATH_TASKS` knows."""
    if cfg.eval.answer_format != "dapo":
        return []
    return [
        (("eval", "lm_eval_tasks", i), f"answer_format {unknown_task(name)}")
        for i, name in enumerate(cfg.eval.lm_eval_tasks)
        if LM_EVAL_ALIASES.get(name, name) not in MATH_TASKS
    ]


def unknown_task(name: str) -> str:
    """What `dapo` cannot do with task `name` (the config's name), and the way out."""
    return (
        f"dapo: fp8rl does not know where {name!r} keeps its question and answer "
        f"(known: {', '.join(known_names())}); use answer_format: task"
    )


def known_names() -> list[str]:
    """`MATH_TASKS` under the names a config uses (`minerva_math500` -> `math500`)."""
    config_name = {v: k for k, v in LM_EVAL_ALIASES.items()}
    return [config_name.get(t, t) for t in MATH_TASKS]
