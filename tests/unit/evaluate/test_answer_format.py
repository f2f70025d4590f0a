"""The paper tier's math evals asked and read in the training format (`eval.answer_format: dapo`): lm-eval's
own readers miss a policy's `Answer: N` line; with `dapo` the prompt is DAPO-Math-17k's instruction and
the reader takes `Answer:`, `\\boxed{}` and minerva's `Final Answer:`. The end-to-end case runs lm-eval's
own gsm8k and aime24 configs on stand-in hub snapshots through the real task builder and evaluator."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fp8rl.config_loader import ConfigError, load_config
from fp8rl.evaluate.answer_format import (
    DAPO_INSTRUCTION,
    answer_format_problems,
    equivalent,
    read_answer,
)
from fp8rl.evaluate.eval_tasks import plan_tasks
from fp8rl.evaluate.lm_eval_runner import registered_config, run_lm_eval
from fp8rl.validation import CONFIG_CHECKS
from tests.hub_fixtures import INSTRUCTION, dapo_rows
from tests.lm_stubs import GenerateOnlyLM

PAPER = Path(__file__).resolve().parents[3] / "config" / "paper.yaml"


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("Let me add.\n3 + 4 = 7\nAnswer: 7", "7"),
        ("Answer: 5 at first, then\nAnswer: 12", "12"),  # the last one counts
        ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}} is the set", "\\{1, 2\\}"),  # balanced braces
        ("Answer: $\\boxed{204}$", "204"),
        ("Final Answer: The final answer is $[2,5)$. I hope it is correct.", "[2,5)"),
        ("answer:  1,234.", "1,234"),
        ("I am not sure.", None),
        ("Answer:   \n", None),
    ],
)
def test_read_answer(response, answer):
    assert read_answer(response) == answer


def test_equivalent_answers():
    assert equivalent("1,234", "1234") and equivalent("0.5", "\\frac{1}{2}") and equivalent("[2,5)", "[2, 5)")
    assert not equivalent("41", "42") and not equivalent("\\frac{1}{3}", "0.5")


def test_the_instruction_is_dapo_math_17k_s_own():
    """The eval prompt is the training prompt of the same question, as DAPO-Math-17k's rows carry it."""
    row = dapo_rows(1, 1)[0]
    assert DAPO_INSTRUCTION.format(question="What is 0 + 0?") == row["prompt"][0]["content"]
    assert DAPO_INSTRUCTION.format(question="Q") == INSTRUCTION.format(q="Q")


# ------------------------------------------------ lm-eval's own tasks on stand-in hub snapshots

CARD = """---
configs:
- config_name: {config}
  data_files:
{files}
---
stand-in
"""
GSM8K = [
    {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(8)
]
AIME = [{"ID": f"2024-I-{i}", "Problem": f"Find {i} * 100.", "Answer": 100 * i} for i in range(1, 4)]
GOLD = {
    **{r["question"]: str(2 * i) for i, r in enumerate(GSM8K)},
    **{r["Problem"]: str(r["Answer"]) for r in AIME},
}


def snapshot(root: Path, rows: list[dict], config: str, splits: tuple[str, ...]) -> str:
    """A dataset repo as `fetch data` snapshots it: a card naming each split's file, the same rows in each."""
    root.mkdir(parents=True)
    files = "".join(f"  - split: {s}\n    path: {s}.jsonl\n" for s in splits)
    (root / "README.md").write_text(CARD.format(config=config, files=files.rstrip("\n")))
    for s in splits:
        (root / f"{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(root)


class TrainingFormatLM(GenerateOnlyLM):
    """Answers every problem right in turn as an `Answer:` line, in `\\boxed{}`, in minerva's sentence,
    then wrong: 3 of every 4 responses are right, whichever reader applies. Records the prompts."""

    FORMATS = ("Adding up.\nAnswer: {}", "so it is \\boxed{{{}}}.", "Final Answer: The final answer is ${}$. "
               "I hope it is correct.", "Answer: {}0")  # fmt: skip

    def __init__(self):
        super().__init__()
        self.calls, self.prompts, self.until = 0, [], []

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            context, kwargs = req.args
            self.prompts.append(context)
            self.until.append(kwargs.get("until"))
            question = next(q for q in GOLD if q in context)
            out.append(self.FORMATS[self.calls % 4].format(GOLD[question]))
            self.calls += 1
        return out


@pytest.fixture
def hub_data(tmp_path, monkeypatch):
    # datasets caches a local dataset folder by its name and config, not its content: keep it per test
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", tmp_path / "datasets_cache")
    data = tmp_path / "data"
    data.mkdir()
    paths = {
        "openai/gsm8k": snapshot(tmp_path / "gsm8k", GSM8K, "main", ("train", "test")),
        "Maxwell-Jia/AIME_2024": snapshot(tmp_path / "aime24", AIME, "default", ("train",)),
    }
    (data / "hub.json").write_text(json.dumps({"datasets": {k: {"path": v} for k, v in paths.items()}}))
    return data


def run(hub_data, tmp_path, answer_format):
    cfg = load_config(PAPER, ["eval.lm_eval_tasks=[gsm8k,aime24]", "eval.repeats={aime24: 4}",
                              f"eval.answer_format={answer_format}"])  # fmt: skip
    plan = plan_tasks("lm_eval", cfg.eval.lm_eval_tasks, hub_data, cache_dir=tmp_path / "cache")
    lm = TrainingFormatLM()
    results = run_lm_eval(cfg, tmp_path / "ckpt", plan, lm=lm)
    return {(r.task, r.metric): (r.value, r.n) for r in results}, lm


def test_dapo_format_asks_and_reads_as_training_did(hub_data, tmp_path):
    scores, lm = run(hub_data, tmp_path, "dapo")
    assert scores == {("gsm8k", "exact_match"): (0.75, 8), ("aime24", "avg@4"): (0.75, 3)}
    assert lm.calls == 8 + 3 * 4
    for prompt in lm.prompts:  # zero-shot, DAPO-Math's instruction around the task's question
        question = next(q for q in GOLD if q in prompt)
        assert prompt == DAPO_INSTRUCTION.format(question=question)
    assert lm.until == [[]] * lm.calls  # no task stop sequence ("Question:") cuts a long answer


def test_the_tasks_own_readers_miss_the_training_format(hub_data, tmp_path):
    """Why `dapo` exists: asked the same way, lm-eval's gsm8k (`#### N` / last number) and aime24 (boxed
    or `$...$`) readers score the same responses differently from what they state."""
    scores, lm = run(hub_data, tmp_path, "task")
    assert scores[("gsm8k", "exact_match,strict-match")][0] == 0.0  # no `#### N` in any response
    assert scores[("aime24", "avg@4")][0] < 0.75  # the `Answer: N` lines are not read
    assert any(re.search(r"Question: .*\nAnswer: \d+", p) for p in lm.prompts)  # gsm8k's few-shot turns


def test_config_check_names_a_task_it_cannot_ask():
    cfg = load_config(PAPER, ["eval.lm_eval_tasks=[gsm8k,ifeval]", "eval.repeats={}"])
    assert answer_format_problems(cfg) == [
        (("eval", "lm_eval_tasks", 1), "answer_format dapo: fp8rl does not know where 'ifeval' keeps its "
         "question and answer (known: gsm8k, math500, aime24, aime25); use answer_format: task")
    ]  # fmt: skip
    with pytest.raises(ConfigError, match=r"eval\.lm_eval_tasks\.1.*ifeval"):
        load_config(PAPER, ["eval.lm_eval_tasks=[gsm8k,ifeval]", "eval.repeats={}"], checks=CONFIG_CHECKS)
    assert load_config(PAPER).eval.answer_format == "dapo"


def test_registered_configs_keep_their_fields():
    """The fields `MATH_TASKS` reads are the ones lm-eval's own configs template from."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    assert "{{question}}" in registered_config(manager, "gsm8k")["doc_to_text"]
    assert "{{Problem}}" in registered_config(manager, "aime24")["doc_to_text"]
    assert "{{problem}}" in registered_config(manager, "aime25")["doc_to_text"]
