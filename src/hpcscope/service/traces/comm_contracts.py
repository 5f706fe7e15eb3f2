"""The ``comm_classes`` section of the trace analysis document (schema
``hpcscope.traces.comm-classes/1``, described in ``docs/traces.md``): communication per class,
hidden and exposed, pipeline bubble, What-if gain, class stragglers, unclassified events.

Keys that are ranks are decimal strings; keys of ``classes`` in a step are class names.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hpcscope.service.contract import Contract, Number


class CommClass(Contract):
    """One communication class over the analysed steps (means per step, by rank)."""

    class_: str = Field(alias="class")
    label: str
    seconds_per_step: dict[str, Number]
    hidden_seconds_per_step: dict[str, Number]
    exposed_seconds_per_step: dict[str, Number]
    hidden_ratio: Number | None
    what_if_gain_seconds: Number
    what_if_gain_ratio: Number | None

    # ``class`` is a Python keyword: the field is ``class_`` in Python only.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_name=True
    )


class CommSeconds(Contract):
    """A class on one rank in one step."""

    seconds: Number
    hidden_seconds: Number
    exposed_seconds: Number


class CommRankStep(Contract):
    """One rank in one step: its compute that can hide a transfer, bubble, classes."""

    compute_seconds: Number
    bubble_seconds: Number
    classes: dict[str, CommSeconds]


class CommStep(Contract):
    step: int
    ranks: dict[str, CommRankStep]


class CommStraggler(Contract):
    """A rank the others wait for in a class."""

    rank: int
    class_: str = Field(alias="class")
    message: str
    wait_seconds_per_step: Number

    # ``class`` is a Python keyword: the field is ``class_`` in Python only.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_name=True
    )


class Unclassified(Contract):
    """Events of one name no class rule matches, on one rank (seconds: union of them)."""

    rank: int
    name: str
    seconds: Number


class CommClasses(Contract):
    """The ``hpcscope.traces.comm-classes/1`` section."""

    schema_: str = Field(alias="schema")
    classes: list[CommClass]
    bubble_seconds_per_step: dict[str, Number]
    per_step: list[CommStep]
    stragglers: list[CommStraggler]
    unclassified: list[Unclassified]
    unclassified_seconds: Number

    # ``schema`` would shadow BaseModel.schema(): the field is ``schema_`` in Python only.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_name=True
    )
