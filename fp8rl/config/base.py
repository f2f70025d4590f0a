"""What every config section shares: the strict base model and the field types built on the vocabulary."""

from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
)

from fp8rl.vocabulary import ALGORITHMS, GRANULARITIES, LOSS_AGG_MODES, VARIANTS, CalibReference

AlgoName = Literal[ALGORITHMS]
VariantName = Literal[VARIANTS]
GranularityName = Literal[GRANULARITIES]
LossAggMode = Literal[LOSS_AGG_MODES]
Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
# `calib.reference`: written `shadow`, `run` or `static:<q>`, held as a parsed CalibReference.
CalibReferenceField = Annotated[
    CalibReference,
    BeforeValidator(CalibReference.parse),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "'shadow', 'run' or 'static:<q>' with 0 <= q < 1"}),
]
# Paths the DAG puts into shell commands: relative to the project, or absolute when they start with '/'.
SAFE_PATH = re.compile(r"/?[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*/?")


# The folder of a results_dir that `fp8rl publish` writes publications into (`{results_dir}/published/
# {tier}`): committed tables, never a results_dir itself.
PUBLISHED_DIR = "published"
# The folder of `{results_dir}/published` that holds each tier's run archive (`fp8rl archive save`).
ARCHIVE_DIR = "archive"


def in_published(path: str) -> bool:
    """True when `path` is a `PUBLISHED_DIR` folder or lies inside one."""
    return PUBLISHED_DIR in path.split("/")


# The longest name of one file or folder most filesystems take (ext4, xfs, btrfs: 255 bytes).
PATH_PART_MAX = 255


def is_safe_path(path: str) -> bool:
    """True when `path` matches `SAFE_PATH` and has no `..` part (safe to put into a shell command)."""
    return bool(SAFE_PATH.fullmatch(path)) and ".." not in path.split("/")


def long_path_part(path: str) -> str | None:
    """The first part of `path` longer than `PATH_PART_MAX` bytes (no filesystem can create it), or None."""
    return next((p for p in path.split("/") if len(p.encode()) > PATH_PART_MAX), None)


# A Hugging Face repository id: `org/name`, each part letters, digits, '_', '.', '-' starting with a
# letter or digit, at most 96 characters, no '..' (never a path: a hub mirror and the hub cache join it).
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def is_hub_id(repo_id: str) -> bool:
    """True when `repo_id` is `org/name` (`HUB_ID`) with no `..`: never an absolute or parent path."""
    return bool(HUB_ID.fullmatch(repo_id)) and ".." not in repo_id


# Names that become a path component (models, FP8 conditions: run ids, base/{model}/): short enough for
# any filesystem (255 bytes a component) with room for the files named after them.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
NAME_MAX = 64


def tier_problem(name: str) -> str | None:
    """Why `name` cannot name a tier, or None. A tier is any config's own name (the shipped ones are the
    files in config/, no list): its outputs go to `{results_dir}/{name}/`, so it must be one path-safe
    folder name (`NAME_PATTERN`, at most `NAME_MAX` characters) other than `PUBLISHED_DIR`."""
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or len(name) > NAME_MAX:
        return (
            f"{name!r} is not a path-safe tier name: use letters, digits, '_', '.' and '-', starting with a "
            f"letter or digit, at most {NAME_MAX} characters (it names the folder {{results_dir}}/{{tier}})"
        )
    if name == ARCHIVE_DIR:  # {results_dir}/published/archive/{tier}: the run archives (fp8rl.run_archive)
        return (
            f"{name!r} cannot be a tier: {{results_dir}}/{PUBLISHED_DIR}/{ARCHIVE_DIR} holds the run archives "
            "(`fp8rl archive save`)"
        )
    if name == PUBLISHED_DIR:
        return (
            f"{name!r} cannot be a tier: {{results_dir}}/{PUBLISHED_DIR} holds the committed publications "
            "(`fp8rl publish`)"
        )
    return None


# Seeds (task.seed, matrix.seeds): what every generator seeds from (numpy's legacy seeding stops at 2^32).
SEED_MAX = 2**32 - 1


def _numeric(annotation: Any) -> bool:
    """The annotation is a number (int or float, possibly optional), not a bool."""
    args = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    return any(a in (int, float) for a in args) and bool not in args


class Strict(BaseModel):
    """Base: unknown keys are errors, assignments are validated, a number is never a boolean
    (`steps: true` is an error, not 1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
    # Fields added after configs were published: left out of the dump while at their default, so the
    # digests of those configs (and the DAG's record of their finished runs) stay as they were.
    OMIT_AT_DEFAULT: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_at_default(self, handler):
        out = handler(self)
        for name in self.OMIT_AT_DEFAULT:
            if getattr(self, name) == type(self).model_fields[name].default:
                out.pop(name, None)
        return out

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{value!r} is a boolean, not a number")
        return value
