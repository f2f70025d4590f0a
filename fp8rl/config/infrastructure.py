"""Where and how the DAG's jobs run, none of which changes a result: per-rule resources, the shared
Hugging Face cache, the container images and the live metric trackers."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fp8rl.config.base import PATH_PART_MAX, Strict, is_safe_path, long_path_part


class Resources(Strict):
    """What one job of a rule asks for (`resources.<rule>`; a rule without its own entry takes
    `resources.default`): threads, memory, runtime and GPUs, and on Slurm its partition, account and
    retries."""

    OMIT_AT_DEFAULT = ("account",)  # added after configs were published: their digests stay

    threads: int = Field(
        1, gt=0, description="CPU threads of one job (also torch's threads in sft and train)"
    )
    mem_mb: int = Field(2000, gt=0, description="memory of one job, MB")
    runtime: int = Field(30, gt=0, description="minutes")
    gpus: int = Field(
        0,
        ge=0,
        description="GPUs of one job; resources.train.gpus > 0 trains on CUDA (verl trains on models[].nodes "
        "x gpus_per_node)",
    )
    partition: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="Slurm partition; None = the site default"
    )
    account: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$", description="Slurm account (sbatch -A); None = the user's default"
    )
    retries: int = Field(
        0, ge=0, description="resubmissions after a failure or time-out (a run resumes from its checkpoint)"
    )


class HubConfig(Strict):
    """The shared Hugging Face cache (`HF_HOME`) that the login-node fetch rules fill and every compute
    job reads offline (bound into the images)."""

    home: str = Field("hf_home", description="HF_HOME, relative to the project unless it starts with '/'")

    @field_validator("home")
    @classmethod
    def _home(cls, v: str) -> str:
        if (part := long_path_part(v)) is not None:
            raise ValueError(f"the part {part[:20]}... is longer than {PATH_PART_MAX} bytes")
        if not is_safe_path(v):
            raise ValueError(f"{v!r} is not a safe path (letters, digits, '_', '.', '-', '/'; no '..')")
        return v


class ContainersConfig(Strict):
    """How rules get their software: on the host (`none`, the smoke/CI default), images built by the
    DAG from `containers/` (`build`), or prebuilt images pulled from `registry` (`prebuilt`)."""

    mode: Literal["none", "build", "prebuilt"] = Field(
        "none",
        description="none: the host's software; build: images built from containers/; prebuilt: pulled "
        "from `registry` by digest",
    )
    engine: Literal["docker", "podman"] = Field("docker", description="the engine that builds the images")
    registry: str = Field(
        "ghcr.io/fp8rl", description="image registry path: images are {registry}/fp8rl-{name}:{tag}"
    )
    tag: str = Field("local", description="tag of images built here; `prebuilt` needs a sha256: digest")
    apptainer: bool = Field(True, description="convert images to Apptainer .sif files for clusters")

    @field_validator("registry")
    @classmethod
    def _registry(cls, v: str) -> str:
        if not re.fullmatch(
            r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*", v
        ):
            raise ValueError(
                f"registry {v!r} is not an image registry path (lower-case letters, digits, '.', '_', '-', "
                "'/' between parts, an optional :port), e.g. 'ghcr.io/fp8rl'"
            )
        return v

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|sha256:[0-9a-f]{64}", v):
            raise ValueError(
                f"tag {v!r} is neither an image tag (letters, digits, '_', '.', '-'; at most 128) "
                "nor a digest (sha256:<64 hex digits>)"
            )
        if v == "latest":
            raise ValueError("tag 'latest' moves: name a fixed tag, or a digest (sha256:<64 hex digits>)")
        return v

    @model_validator(mode="after")
    def _prebuilt_by_digest(self) -> ContainersConfig:
        if self.mode == "prebuilt" and not self.tag.startswith("sha256:"):
            raise ValueError(
                f"mode 'prebuilt' pulls by digest: tag must be sha256:<64 hex digits>, got {self.tag!r}"
            )
        return self


class WandbConfig(Strict):
    """Weights & Biases: `offline` writes the run under `{run}/wandb/` with no network (`wandb sync`
    uploads it later); `online` needs a login."""

    enabled: bool = Field(False, description="log each training run to W&B (needs fp8rl[tracking])")
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: files under {run}/wandb/, `wandb sync` later; online: needs a login"
    )
    project: str = Field("fp8rl", description="the W&B project of the runs")
    entity: str | None = Field(None, description="the W&B entity (user or team); None: the login's default")


class MlflowConfig(Strict):
    """MLflow tracking: `tracking_uri` None is a local file store, `{results_dir}/{tier}/mlruns`."""

    enabled: bool = Field(False, description="log each training run to MLflow (needs fp8rl[tracking])")
    tracking_uri: str | None = Field(None, description="e.g. file:///abs/mlruns or http://host:5000")
    experiment: str = Field("fp8rl", description="the MLflow experiment the runs are logged under")


class TrackingConfig(Strict):
    """Where training runs log their metrics live, besides metrics.jsonl (fp8rl.tracking). Not part of
    TRAIN_SECTIONS: it changes no result, so toggling a tracker reruns nothing."""

    tensorboard: bool = Field(True, description="TensorBoard event files in each run's tb/ folder")
    wandb: WandbConfig = WandbConfig()
    mlflow: MlflowConfig = MlflowConfig()
