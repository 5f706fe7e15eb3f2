"""The pydantic model of a kernel class file: what words the errors of a file that
:mod:`hpcscope.service.traces.kernel_classes` cannot accept as it is (imported only then)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ClassFileRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str = Field(min_length=1)
    events: Literal["gpu", "cpu"]
    op: Literal[
        "all_reduce",
        "reduce_scatter",
        "all_gather",
        "all_to_all",
        "send",
        "recv",
        "send_recv",
        "broadcast",
        "reduce",
        "barrier",
        "collective",
        "peer_copy",
        "compute",
    ]
    dimension: Literal["dp", "tp", "ep", "pp", "none"]
    role: Literal["transfer", "launch"] = "transfer"
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
