"""What every config section shares: the strict base model and the field types built on the vocabulary."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

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


def is_safe_path(path: str) -> bool:
    """True when `path` matches `SAFE_PATH` and has no `..` part (safe to put into a shell command)."""
    return bool(SAFE_PATH.fullmatch(path)) and ".." not in path.split("/")


class Strict(BaseModel):
    """Base: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
