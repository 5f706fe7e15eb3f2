"""The committed JSON Schemas of ``docs/schemas/`` are those the contracts generate."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from hpcscope.serve import schemas

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schemas_match_the_code() -> None:
    problems = schemas.drift(ROOT / schemas.SCHEMA_DIR)
    assert not problems, "\n".join([*problems, f"run `{schemas.REGENERATE}` to update"])


def test_drift_names_a_changed_missing_and_stale_file(tmp_path: Path) -> None:
    schemas.write(tmp_path)
    assert schemas.drift(tmp_path) == []
    (tmp_path / "job-list.schema.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "job-report.schema.json").unlink()
    (tmp_path / "old.schema.json").write_text("{}\n", encoding="utf-8")
    assert schemas.drift(tmp_path) == [
        f"{tmp_path}/job-report.schema.json: missing",
        f"{tmp_path}/job-list.schema.json: differs from the code",
        f"{tmp_path}/old.schema.json: no contract of that name (stale)",
    ]
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1
    assert schemas.main(["--dir", str(tmp_path)]) == 0
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0
    assert not (tmp_path / "old.schema.json").exists()


def _objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every sub-schema of ``schema`` that declares properties."""
    if isinstance(schema, dict):
        if "properties" in schema:
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


#: Contracts that are pydantic models (the others are service dataclasses: their JSON comes
#: from ``jsonable``, which emits exactly their fields).
MODELS = sorted(n for n, c in schemas.CONTRACTS.items() if issubclass(c, BaseModel))


@functools.cache
def _texts() -> dict[str, str]:
    """Every schema's text, generated once for the parametrised test below (~0.2 s a time)."""
    return schemas.schema_texts()


@pytest.mark.parametrize("name", MODELS)
def test_every_object_of_every_schema_forbids_unknown_fields(name: str) -> None:
    schema = json.loads(_texts()[f"{name}.schema.json"])
    assert schema["title"] == schemas.CONTRACTS[name].__name__
    objects = list(_objects(schema))
    assert objects
    loose = [o["title"] for o in objects if o.get("additionalProperties") is not False]
    assert not loose, f"{name}: objects that accept unknown fields: {loose}"
