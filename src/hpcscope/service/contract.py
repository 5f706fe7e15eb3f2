"""The base of every document hpcscope emits over the API and the CLI (issue 11, part 3).

Each capability declares its documents next to the code that emits them
(``service/<capability>/contracts.py``); :mod:`hpcscope.serve.schemas` lists them and writes
their JSON Schema to ``docs/schemas/`` (``make schemas``), and a test fails when a committed
schema drifts from the code.

Why pydantic v2 models rather than msgspec Structs: FastAPI builds ``/api/openapi.json`` from
pydantic models natively, so one class is the route's ``response_model``, its entry under
``components.schemas`` and the committed JSON Schema. A msgspec Struct would need a second
description for FastAPI. The documents are small (one per request), so validating them costs
nothing next to building them.

The wire bytes stay those of the dicts the code built before the contracts: fields are declared
in the order they were emitted, and numbers that are sometimes integers keep their type
(:data:`Number`), so ``2`` is not re-emitted as ``2.0``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, WithJsonSchema

#: A JSON number that may be an integer or a float: kept as emitted (strict pydantic turns an
#: ``int`` into a ``float`` for a ``float`` field, which would change the bytes on the wire).
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]

#: Scalars a figure of a free-form table may hold.
Scalar = str | int | float | bool | None

#: ISO 8601 UTC time with a ``Z`` suffix (``2026-12-01T19:42:40.300898Z``).
UtcText = Annotated[
    str, WithJsonSchema({"type": "string", "description": "ISO 8601 UTC, suffix Z"})
]


class Contract(BaseModel):
    """A document (or part of one) that the API or the CLI emits.

    Unknown fields are an error (``extra="forbid"``) and values are not coerced
    (``strict=True``): a renamed or retyped field fails the emitting code's tests instead of
    reaching a page or a user's script.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
