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
