"""The paper tier's eval model (fp8rl.evaluate.vllm_seeded): every generation request gets its own
sampling seed, so the k copies of an avg@k prompt sample independently whatever the replica layout.
The subclass runs through lm-eval's real `vllm` module, with a stand-in for vllm itself (no CPU build)."""

from __future__ import annotations

import importlib.metadata
import sys
import types
from dataclasses import dataclass, field

import pytest

from fp8rl.evaluate import vllm_seeded
from fp8rl.evaluate.vllm_seeded import request_seeds


def test_copies_of_a_prompt_get_distinct_seeds_that_do_not_depend_on_order():
    prompts = [[1, 2, 3]] * 16 + [[4, 5]] * 16
    seeds = request_seeds(1234, prompts)
    assert len(set(seeds[:16])) == 16 and len(set(seeds[16:])) == 16 and not set(seeds[:16]) & set(seeds[16:])
    assert all(0 <= s < 2**63 for s in seeds)
    interleaved = [p for pair in zip(prompts[:16], prompts[16:], strict=True) for p in pair]  # another order
    assert sorted(request_seeds(1234, interleaved)) == sorted(seeds)  # the same set of draws per prompt
    assert request_seeds(1234, prompts) == seeds and request_seeds(1235, prompts) != seeds
    # one replica's share of the old layout (every 4th copy) no longer repeats another replica's seeds
    replicas = [seeds[i::4] for i in range(4)]
    assert len({tuple(r) for r in replicas}) == 4


@dataclass
class FakeSamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    stop: list = field(default_factory=list)
    prompt_logprobs: int | None = None
    detokenize: bool = True

    def clone(self):
        return FakeSamplingParams(**{**self.__dict__, "stop": list(self.stop)})


class FakeLLM:
    def __init__(self, **kwargs):
        self.calls = []

    def generate(self, prompts, sampling_params=None, use_tqdm=False, lora_request=None):
        self.calls.append((prompts, sampling_params))
        return [p.seed for p in sampling_params]


@pytest.fixture
def seeded_class(monkeypatch):
    """lm-eval's vllm module imported against stand-in vllm modules; SeededVLLM built from it."""
    fake = {
        name: types.ModuleType(name) for name in ("vllm", "vllm.lora", "vllm.lora.request", "vllm.tokenizers")
    }
    fake["vllm"].LLM, fake["vllm"].SamplingParams = FakeLLM, FakeSamplingParams
    fake["vllm"].TokensPrompt = lambda prompt_token_ids: tuple(prompt_token_ids)
    fake["vllm.lora.request"].LoRARequest = object
    fake["vllm.tokenizers"].get_tokenizer = lambda *a, **k: None
    for name, module in fake.items():
        monkeypatch.setitem(sys.modules, name, module)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: "0.8.0" if n == "vllm" else real_version(n))
    monkeypatch.delitem(sys.modules, "lm_eval.models.vllm_causallms", raising=False)
    import lm_eval.api.registry

    monkeypatch.setattr(lm_eval.api.registry, "register_model", lambda *names: lambda cls: cls)
    monkeypatch.setattr(vllm_seeded, "_REGISTERED", {})
    assert vllm_seeded.register() == "fp8rl-vllm"
    cls = vllm_seeded._REGISTERED["fp8rl-vllm"]
    yield cls
    sys.modules.pop("lm_eval.models.vllm_causallms", None)


def test_the_subclass_seeds_each_request_through_lm_evals_own_generate_path(seeded_class):
    from lm_eval.models.vllm_causallms import VLLM

    assert issubclass(seeded_class, VLLM)
    lm = object.__new__(
        seeded_class
    )  # lm-eval's __init__ builds an engine; its generate path is what we test
    lm.model_args, lm.data_parallel_size, lm.batch_size, lm.lora_request = {"seed": 7}, 1, "auto", None
    lm.model = FakeLLM()
    shared = FakeSamplingParams(temperature=1.0)
    requests = [[5, 6, 7]] * 4 + [[8]] * 2
    out = lm._model_generate(requests, generate=True, sampling_params=[shared] * len(requests))
    assert out == request_seeds(7, requests) and len(set(out)) == 6
    assert shared.seed is None  # the task's own params are not modified
    _, sent = lm.model.calls[0]
    assert [p.temperature for p in sent] == [1.0] * 6 and sent[0] is not shared
    # log-likelihood calls (generate=False) keep lm-eval's own greedy params
    lm.model.calls.clear()
    lm._model_generate([[1, 2]], generate=False)
    assert lm.model.calls[0][1][0].seed is None and lm.model.calls[0][1][0].temperature == 0


# ------------------------------------------------- the eval job's arguments through lm-eval's own vllm model

# vLLM 0.24's engine arguments (vllm.engine.arg_utils.EngineArgs fields) that lm-eval's model hands on
ENGINE_ARGS = {"model", "revision", "dtype", "tokenizer", "tokenizer_mode", "tokenizer_revision",
               "trust_remote_code", "tensor_parallel_size", "max_model_len", "max_num_seqs", "quantization",
               "seed", "enable_lora", "max_lora_rank", "gpu_memory_utilization"}  # fmt: skip


class ReachedEngine(Exception):
    """Where vLLM would build its engine on a GPU: the stand-in stops there with the engine arguments."""

    def __init__(self, kwargs):
        super().__init__(sorted(kwargs))
        self.kwargs = kwargs


@pytest.fixture
def lm_eval_vllm(monkeypatch):
    """fp8rl-vllm as lm-eval builds it, against a stand-in vLLM of the eval image's version (0.24.0)
    whose engine (one replica: `LLM`; replicas: `EngineArgs`) stops with the arguments it got."""
    from transformers import AutoTokenizer

    class StopLLM:
        def __init__(self, **kwargs):
            raise ReachedEngine(kwargs)

    class StopEngineArgs:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def create_model_config(self):
            raise ReachedEngine(self.kwargs)

    names = ("vllm", "vllm.lora", "vllm.lora.request", "vllm.tokenizers", "vllm.renderers", "vllm.renderers.hf",
             "vllm.engine", "vllm.engine.arg_utils")  # fmt: skip
    fake = {name: types.ModuleType(name) for name in names}
    fake["vllm"].LLM, fake["vllm"].SamplingParams = StopLLM, FakeSamplingParams
    fake["vllm"].TokensPrompt = lambda prompt_token_ids: tuple(prompt_token_ids)
    fake["vllm.lora.request"].LoRARequest = object
    fake["vllm.tokenizers"].get_tokenizer = lambda name, **kw: AutoTokenizer.from_pretrained(name)
    fake["vllm.renderers.hf"].resolve_chat_template = lambda **kw: None
    fake["vllm.engine.arg_utils"].EngineArgs = StopEngineArgs
    for name, module in fake.items():
        monkeypatch.setitem(sys.modules, name, module)
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda n: "0.24.0" if n == "vllm" else real_version(n))
    monkeypatch.delitem(sys.modules, "lm_eval.models.vllm_causallms", raising=False)
    import lm_eval.api.registry

    monkeypatch.setattr(lm_eval.api.registry, "register_model", lambda *names: lambda cls: cls)
    monkeypatch.setattr(vllm_seeded, "_REGISTERED", {})
    name = vllm_seeded.register()
    from lm_eval.models import vllm_causallms

    # the eval image has vllm and ray (lm-eval's replicas are Ray actors); here their stand-ins
    monkeypatch.setattr(vllm_causallms, "find_spec", lambda n: n in ("vllm", "ray") or None)
    yield vllm_seeded._REGISTERED[name]
    sys.modules.pop("lm_eval.models.vllm_causallms", None)


@pytest.mark.parametrize(
    ("config", "model", "replicas"),
    [("paper", "qwen3-8b", 8), ("paper", "qwen2.5-32b", 4), ("verl_smoke", "qwen3-0.6b", 1)],
)
def test_lm_evals_vllm_model_takes_the_eval_jobs_arguments(lm_eval_vllm, tmp_path, config, model, replicas):
    """`fp8rl eval lm-eval`'s model arguments through lm-eval 0.4.13's own model construction (as
    simple_evaluate calls it) up to vLLM's engine: lm-eval accepts them, and the engine gets the eval
    protocol's (checkpoint, parallelism, context, memory) as vLLM 0.24 engine arguments."""
    import json
    from pathlib import Path

    from fp8rl.adapters.verl_rehearse import stand_in_model
    from fp8rl.config_loader import load_config
    from fp8rl.evaluate.protocol import vllm_model_args
    from fp8rl.run_files import RunDir

    cfg = load_config(Path(__file__).resolve().parents[3] / "config" / f"{config}.yaml")
    run = RunDir(tmp_path / "run")
    stand_in_model(run.checkpoint, "qwen2" if "2.5" in model else "qwen3")
    run.summary.write_text(json.dumps({"run_id": f"grpo/{model}/bf16/none/seed0"}))
    args = vllm_model_args(cfg, run.checkpoint)
    assert args["data_parallel_size"] == replicas
    with pytest.raises(ReachedEngine) as reached:
        lm_eval_vllm.create_from_arg_obj(args, {"batch_size": "auto", "max_batch_size": None, "device": None})
    engine = reached.value.kwargs
    assert set(engine) <= ENGINE_ARGS, set(engine) - ENGINE_ARGS
    assert engine["model"] == str(run.checkpoint) and engine["dtype"] == "auto"
    for key in ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization"):
        assert engine[key] == args[key], key
