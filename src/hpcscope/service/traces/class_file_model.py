"""The pydantic model of a kernel class file: what words the errors of a file that
:mod:`hpcscope.service.traces.kernel_classes` cannot accept as it is (imported only then)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hpcscope.analysis.traces.kernel_classes import Dimension, EventKind, Operation, Role


class ClassFileRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str = Field(min_length=1)
    events: EventKind
    op: Operation
    dimension: Dimension
    role: Role = "transfer"
    library: str = ""

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class ClassFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: Literal["hpcscope.kernel-classes/1"] = Field(alias="schema")
    rules: list[ClassFileRule]
