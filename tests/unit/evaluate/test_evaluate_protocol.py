"""The eval protocol at paper scale: the task configs and vLLM model args built for config/paper.yaml
carry the generation budget, the sampling settings, avg@k and data-parallel replicas; the smoke and small
tiers keep greedy task YAMLs and the `hf` model. avg@k and the per-sample log run through real lm-eval."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from fp8rl.config_loader import ConfigError, load_config, validate_config
from fp8rl.evaluate.eval_tasks import EVALS_DIR, EvalInputError, plan_tasks
from fp8rl.evaluate.lm_eval_runner import model_spec, registered_config, run_lm_eval
from fp8rl.evaluate.protocol import (
    AvgAtK,
    task_specs,
    vllm_model_args,
    vllm_parallelism,
)
from fp8rl.evaluate.schema import samples_path
from fp8rl.run_files import RunDir
from tests.lm_stubs import GenerateOnlyLM

CONFIG = Path(__file__).resolve().parents[3] / "config"
PAPER = load_config(CONFIG / "paper.yaml")


@pytest.fixture(scope="module")
def manager():
    from lm_eval.tasks import TaskManager

    return TaskManager()


@pytest.fixture(scope="module")
def resolve(manager):
    """lm-eval's own task configs; minerva_math500's helpers need lm-eval[math] (antlr 4.11), not in
    this environment, so gsm8k's config stands in for it."""

    def read(name):
        return registered_config(manager, "gsm8k" if name == "minerva_math500" else name) | {"task": name}

    return read


def paper_specs(data_dir, resolve):
    plan = plan_tasks("lm_eval", PAPER.eval.lm_eval_tasks, data_dir)
    specs = task_specs(plan.lm_eval_specs, plan.report_names, PAPER.eval, resolve)
    return {plan.report_names[s["task"]]: s for s in specs}


def test_paper_tasks_carry_the_generation_budget_and_sampling(data_dir, resolve):
    """Every paper task, as lm-eval reads its YAML, gets the config's decoding; asked in the training
    format (answer_format dapo), no task stop sequence ("Question:") cuts a long answer."""
    specs = paper_specs(data_dir, resolve)
    assert set(specs) == {"gsm8k", "math500", "aime24", "aime25"}
    ev = PAPER.eval
    assert ev.max_gen_toks >= 8192 and ev.temperature > 0 and ev.top_p is not None
    for name, spec in specs.items():
        gen = spec["generation_kwargs"]
        assert gen["max_gen_toks"] == ev.max_gen_toks, name
        assert gen["temperature"] == ev.temperature and gen["do_sample"] is True, name
        assert gen["top_p"] == ev.top_p, name
        assert gen["until"] == [], name  # lm-eval stops at the model's end of sequence
    assert ev.repeats == {"aime24": 16, "aime25": 16}


@pytest.mark.parametrize("task", ["aime24", "aime25"])
def test_paper_aime_is_avg_at_k_over_k_samples(task, data_dir, resolve):
    spec = paper_specs(data_dir, resolve)[task]
    k = PAPER.eval.repeats[task]
    assert spec["repeats"] == k
    assert spec["filter_list"] == [{"name": f"first_{k}", "filter": [{"function": "take_first_k", "k": k}]}]
    assert spec["metric_list"] == [{"metric": f"avg@{k}", "aggregation": "mean", "higher_is_better": True}]
    avg = spec["process_results"]
    assert isinstance(avg, AvgAtK) and avg.k == k
    # the answer reader on each sample: 4 of 16 answers right -> 0.25
    doc = {"Answer": 204, "Problem": "p"} if task == "aime24" else {"answer": "204", "problem": "p"}
    responses = ["so \\boxed{204}", "Answer: 204"] * 2 + ["so \\boxed{7}"] * (k - 4)
    assert avg(doc, [responses]) == {f"avg@{k}": 0.25}
    with pytest.raises(ValueError, match="expected 16"):
        avg(doc, [responses[:3]])


def test_paper_vllm_replicas_by_model_size(tmp_path, monkeypatch):
    """8B and 14B fit one 80 GB GPU: 8 data-parallel replicas; 32B needs tensor parallel 2: 4 replicas."""
    expected = {"qwen3-8b": (1, 8), "qwen3-14b": (1, 8), "qwen2.5-32b": (2, 4)}
    assert PAPER.resources_for("eval").gpus == 8
    for model, (tp, dp) in expected.items():
        run = tmp_path / model
        RunDir(run).checkpoint.mkdir(parents=True)
        RunDir(run).summary.write_text(json.dumps({"run_id": f"dapo/{model}/bf16/none/seed0"}))
        (RunDir(run).checkpoint / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
        args = vllm_model_args(PAPER, RunDir(run).checkpoint)
        assert (args["tensor_parallel_size"], args["data_parallel_size"]) == (tp, dp), model
        assert args["max_gen_toks"] == PAPER.eval.max_gen_toks
        assert args["max_model_len"] == min(40960, 4096 + PAPER.eval.max_gen_toks)
        thinks = model.startswith("qwen3")  # Qwen3 thinks by default; lm-eval scores after </think>
        assert (args.get("enable_thinking"), args.get("think_end_token")) == (
            (True, "</think>") if thinks else (None, None)
        )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    from fp8rl.evaluate import vllm_seeded

    monkeypatch.setattr(vllm_seeded, "register", lambda: vllm_seeded.MODEL_NAME)  # it imports vllm
    name, args = model_spec(PAPER, RunDir(tmp_path / "qwen3-8b").checkpoint)
    assert name == "fp8rl-vllm" and args["data_parallel_size"] == 8  # lm-eval's vllm, a seed per request


def test_vllm_parallelism_rule():
    assert vllm_parallelism("8B", 8, 80) == (1, 8)
    assert vllm_parallelism("32B", 8, 80) == (2, 4)
    assert vllm_parallelism("70B", 8, 80) == (4, 2)
    assert vllm_parallelism("32B", 8, 40) == (4, 2)
    assert vllm_parallelism("1T", 8, 80) == (8, 1)  # does not fit: all GPUs, one replica
    assert vllm_parallelism(None, 8, 80) == (8, 1)  # size unknown: the old tensor-parallel-8 path
    assert vllm_parallelism("8B", 0, 80) == (1, 1)


@pytest.mark.parametrize("tier", ["smoke", "small"])
def test_small_tiers_keep_greedy_task_yamls_and_hf(tier, data_dir, tmp_path):
    cfg = load_config(CONFIG / f"{tier}.yaml")
    ev = cfg.eval
    assert (ev.max_gen_toks, ev.temperature, ev.top_p, ev.repeats) == (None, None, None, {})
    plan = plan_tasks("lm_eval", ev.lm_eval_tasks, data_dir)
    specs = task_specs(plan.lm_eval_specs, plan.report_names, ev, lambda n: pytest.fail(f"resolved {n}"))
    assert specs == plan.lm_eval_specs
    generative = [s for s in specs if s["output_type"] == "generate_until"]
    assert generative and all(s["generation_kwargs"]["do_sample"] is False for s in generative)
    assert model_spec(cfg, tmp_path)[0] == "hf"


def test_protocol_keys_are_validated():
    base = {
        "tier": "paper",
        "models": [{"name": "m", "source": "scratch"}],
        "matrix": {"algorithms": ["grpo"], "models": ["m"], "variants": ["bf16"], "seeds": [0]},
    }
    bad = {
        "top_p needs eval.temperature > 0": {"top_p": 0.9},
        "'aime24' is not in eval.lm_eval_tasks": {"temperature": 1.0, "repeats": {"aime24": 4}},
        "avg@4 needs eval.temperature > 0": {"lm_eval_tasks": ["aime24"], "repeats": {"aime24": 4}},
    }
    for message, ev in bad.items():
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            validate_config({**base, "eval": ev})


# ----------------------------------------------------------------- through real lm-eval, scripted model

SCORED_TASK = """task: arith_scored
dataset_path: json
dataset_kwargs:
  data_files:
    test: test.jsonl
test_split: test
output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 8
process_results: !function scored_utils.process_results
metric_list:
  - {metric: exact_match, aggregation: mean, higher_is_better: true}
num_fewshot: 0
"""
SCORED_UTILS = """def process_results(doc, results):
    return {"exact_match": float(results[0].strip() == doc["answer"])}
"""


class AlternatingLM(GenerateOnlyLM):
    """Right on every other generation; records the generation kwargs each request carried."""

    def __init__(self):
        super().__init__()
        self.calls, self.gen_kwargs = 0, []

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            context, kwargs = req.args
            self.gen_kwargs.append(kwargs)
            a, b = context.removesuffix("=").split("+")
            out.append(str(int(a) + int(b) + (self.calls % 2)))
            self.calls += 1
        return out


def test_avg_at_k_and_sample_log_through_lm_eval(data_dir, tmp_path, monkeypatch):
    root = tmp_path / "evals"
    shutil.copytree(EVALS_DIR, root)
    (root / "lm_eval" / "arith_scored.yaml").write_text(SCORED_TASK)
    (root / "lm_eval" / "scored_utils.py").write_text(SCORED_UTILS)
    monkeypatch.setenv("FP8RL_EVALS_DIR", str(root))
    cfg = validate_config(
        {
            "tier": "smoke",
            "models": [{"name": "tiny", "source": "scratch"}],
            "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16"], "seeds": [0]},
            "eval": {
                "lm_eval_tasks": ["arith_scored"],
                "limit": 6,
                "max_gen_toks": 64,
                "temperature": 0.8,
                "top_p": 0.9,
                "repeats": {"arith_scored": 4},
            },
        }
    )
    plan = plan_tasks("lm_eval", ["arith_scored"], data_dir, cache_dir=tmp_path / "cache")
    lm = AlternatingLM()
    out = tmp_path / "eval" / "lm_eval.json"
    results = run_lm_eval(cfg, tmp_path / "ckpt", plan, lm=lm, samples_out=samples_path(out))
    assert [(r.task, r.metric, r.value, r.n) for r in results] == [("arith_scored", "avg@4", 0.5, 6)]
    assert lm.calls == 6 * 4
    assert {(g["max_gen_toks"], g["temperature"], g["top_p"], g["do_sample"]) for g in lm.gen_kwargs} == {
        (64, 0.8, 0.9, True)
    }
    assert samples_path(out) == tmp_path / "eval" / "lm_eval.samples.jsonl"
    rows = [json.loads(line) for line in samples_path(out).read_text().splitlines()]
    assert len(rows) == 6 and {r["task"] for r in rows} == {"arith_scored"}
    for row in rows:
        assert len(row["responses"]) == 4 and row["scores"] == {"avg@4": 0.5}
        assert row["prompt"].endswith("=") and row["target"] == row["doc"]["answer"]


def test_avg_at_k_needs_a_process_results_task(data_dir):
    ev = validate_config(
        {
            "tier": "smoke",
            "models": [{"name": "tiny", "source": "scratch"}],
            "matrix": {"algorithms": ["grpo"], "models": ["tiny"], "variants": ["bf16"], "seeds": [0]},
            "eval": {"lm_eval_tasks": ["arith_gen"], "temperature": 1.0, "repeats": {"arith_gen": 4}},
        }
    ).eval
    plan = plan_tasks("lm_eval", ["arith_gen"], data_dir)
    with pytest.raises(EvalInputError, match=r"eval\.repeats\.arith_gen: avg@k needs a task scored by one"):
        task_specs(plan.lm_eval_specs, plan.report_names, ev, lambda n: {})
