"""The `eval` section: which suites score the trained models and with what decoding protocol."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from fp8rl.config.base import NAME_MAX, NAME_PATTERN, Strict

# A task is named, never a path: the name picks `evals/{suite}/{name}.yaml` or one of lm-eval's tasks,
# so no '/' and no leading '.' (which tasks exist is a config check: fp8rl.evaluate.eval_tasks).
TaskName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=NAME_MAX)]


class HeldoutConfig(Strict):
    """The held-out endpoint (fp8rl.engine.heldout): every run's final checkpoint and its base scored with
    the bf16 sampler on prompts no split holds: greedy accuracy, and the mean reward of `samples` samples
    per prompt at the training temperature."""

    prompts: int = Field(
        512,
        ge=2,
        le=100_000,
        description="held-out prompts, drawn beside train and test (at least two: a score's standard "
        "error needs two)",
    )
    samples: int = Field(4, ge=1, le=64, description="samples per prompt for the sampled reward")
    seed: int = Field(0, ge=0, description="the sampling generator's seed (the same for every checkpoint)")


class EvalConfig(Strict):
    """The eval suites and their protocol (docs/interfaces.md#eval-protocol). Unset decoding keys leave
    each task's own decoding (the smoke/small task YAMLs: greedy, short answers)."""

    OMIT_AT_DEFAULT = ("answer_format", "heldout", "suites")

    lm_eval_tasks: list[TaskName] = Field(
        [],
        description="lm-eval tasks (evals/lm_eval/ YAMLs, or gsm8k, math500, aime24, aime25) scored on each "
        "run's final checkpoint -> eval/lm_eval.json",
    )
    agent: list[TaskName] = Field(
        [], description="function-calling tasks (evals/agent/ YAMLs or BFCL categories) -> eval/agent.json"
    )
    limit: int | None = Field(None, gt=0, description="examples per task; None = all")
    batch_size: int = Field(
        16, gt=0, description="lm-eval's batch size for the transformers (hf) model; vLLM batches on its own"
    )
    max_gen_toks: int | None = Field(None, gt=0, description="generation length of every generative task")
    temperature: float | None = Field(None, ge=0.0, description="sampling temperature; 0 = greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling (needs temperature > 0)")
    repeats: dict[str, int] = Field(
        {}, description="lm-eval task -> k samples per problem, reported as avg@k (needs temperature > 0)"
    )
    answer_format: Literal["task", "dapo"] = Field(
        "task",
        description="task: each lm-eval task's own prompt and answer reader; dapo: the math tasks asked "
        "with DAPO-Math-17k's instruction (last line `Answer: X`) and read as its scorer reads them",
    )
    heldout: HeldoutConfig | None = Field(
        None, description="the held-out bf16 endpoint of every run and base (reference backend); None: off"
    )
    gpu_memory_gb: float = Field(80.0, gt=0.0, description="memory of one eval GPU (vLLM replica sizing)")
    suites: dict[TaskName, dict[str, Any]] = Field(
        {},
        description="the other registered eval suites (fp8rl/evaluate/suites/) to run, each with its options "
        "(checked against the suite's own `options` model); a suite named here is on",
    )

    @model_validator(mode="after")
    def _protocol(self) -> EvalConfig:
        for key in ("lm_eval_tasks", "agent"):
            names = getattr(self, key)
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"eval.{key}: {', '.join(map(repr, twice))} named more than once")
        sampling = (self.temperature or 0.0) > 0.0
        if self.top_p is not None and not sampling:
            raise ValueError("eval.top_p needs eval.temperature > 0 (greedy decoding has no nucleus)")
        for task, k in self.repeats.items():
            if task not in self.lm_eval_tasks:
                raise ValueError(f"eval.repeats: {task!r} is not in eval.lm_eval_tasks")
            if k < 1:
                raise ValueError(f"eval.repeats.{task}: {k} must be >= 1")
            if k > 1 and not sampling:
                raise ValueError(
                    f"eval.repeats.{task}: avg@{k} needs eval.temperature > 0 (greedy gives k copies of one)"
                )
        return self
