"""A kernel class file read without pydantic (libyaml, plain checks) gives the table the
pydantic model gives, and takes no file the model refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.kernel_classes import DIMENSIONS, EVENTS, OPS, ROLES
from hpcscope.service.traces import kernel_classes
from hpcscope.service.traces.class_file_model import ClassFileRule
from hpcscope.service.traces.kernel_classes import (
    ClassFileError,
    bundled_classes_file,
    load_class_file,
)


def _slow(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What the pydantic path gives (None: it refuses the file)."""
    with monkeypatch.context() as patch:
        patch.setattr(kernel_classes, "_FAST_LOADER", None)
        try:
            return load_class_file(path)
        except ClassFileError:
            return None


def test_the_model_allows_the_values_the_plain_checks_allow() -> None:
    fields = ClassFileRule.model_fields
    assert get_args(fields["events"].annotation) == EVENTS
    assert get_args(fields["op"].annotation) == OPS
    assert get_args(fields["dimension"].annotation) == DIMENSIONS
    assert get_args(fields["role"].annotation) == ROLES
    assert set(fields) == kernel_classes._RULE_KEYS


def test_the_bundled_table_is_read_without_pydantic_and_as_pydantic_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = bundled_classes_file()
    fast = kernel_classes._accepted(path.read_text(encoding="utf-8"), str(path))
    assert fast  # read without pydantic
    assert fast == load_class_file(path) == _slow(path, monkeypatch)


_TEXT = st.sampled_from(["a", "^nccl", "(unclosed", "", "gpu", "cpu", "tp", "send", "launch"])
_VALUE = st.one_of(
    _TEXT,
    st.sampled_from([*EVENTS, *OPS, *DIMENSIONS, *ROLES]),
    st.integers(-1, 2),
    st.booleans(),
    st.none(),
    st.lists(_TEXT, max_size=1),
)
_KEYS = st.sampled_from(["match", "events", "op", "dimension", "role", "library", "colour"])
_ENTRY = st.one_of(
    st.fixed_dictionaries(
        {
            "match": st.sampled_from(["^nccl", "a|b", "(unclosed", ""]),
            "events": st.sampled_from([*EVENTS, "gpu "]),
            "op": st.sampled_from([*OPS, "teleport"]),
            "dimension": st.sampled_from([*DIMENSIONS, "xp"]),
        },
        optional={
            "role": st.sampled_from([*ROLES, "other"]),
            "library": st.sampled_from(["nccl", "", "x"]),
        },
    ),
    st.dictionaries(_KEYS, _VALUE, max_size=6),
    _VALUE,
)
_FILE = st.one_of(
    st.fixed_dictionaries(
        {
            "schema": st.sampled_from(["hpcscope.kernel-classes/1", "hpcscope.kernel-classes/2"]),
            "rules": st.lists(_ENTRY, max_size=4),
        }
    ),
    st.dictionaries(st.sampled_from(["schema", "rules", "extra"]), _VALUE, max_size=3),
    _VALUE,
)


@settings(max_examples=150, deadline=None)
@given(document=_FILE, flow=st.booleans())
def test_a_file_reads_the_same_with_and_without_pydantic(
    tmp_path_factory: pytest.TempPathFactory, document: Any, flow: bool
) -> None:
    path = tmp_path_factory.mktemp("classes") / "classes.yaml"
    path.write_text(yaml.safe_dump(document, default_flow_style=flow), encoding="utf-8")
    fast = kernel_classes._accepted(path.read_text(encoding="utf-8"), str(path))
    with pytest.MonkeyPatch.context() as monkeypatch:
        slow = _slow(path, monkeypatch)
    assert fast == slow
