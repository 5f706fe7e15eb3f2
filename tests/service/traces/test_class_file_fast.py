"""A kernel class file read without pydantic (libyaml, plain checks) gives the table the
pydantic model gives, and takes no file the model refuses."""

from __future__ import annotations

import marshal
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


def test_the_bundled_rules_come_back_from_the_cache_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = bundled_classes_file()
    first = kernel_classes._bundled_rules(path)  # read from the YAML, then cached
    assert first == load_class_file(path)
    assert len(list((tmp_path / "hpcscope").glob("kernel-classes-*.marshal"))) == 1

    def no_yaml(text: str, source: str) -> None:
        raise AssertionError("the YAML was read again")

    monkeypatch.setattr(kernel_classes, "_accepted", no_yaml)
    assert kernel_classes._bundled_rules(path) == first


def test_a_stale_or_broken_cache_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = bundled_classes_file()
    expected = load_class_file(path)
    kernel_classes._bundled_rules(path)
    (cache,) = (tmp_path / "hpcscope").glob("*.marshal")
    source, text = str(path), path.read_text(encoding="utf-8")
    form = kernel_classes._CACHE_FORMAT
    kernel_classes._to_cache(cache, source, text + "# edited\n", expected[:1])  # another text
    assert kernel_classes._bundled_rules(path) == expected
    for broken in (
        b"",
        b"\xffnot marshal",
        marshal.dumps(("hpcscope.kernel-classes.cache/0", source, text, ())),
        marshal.dumps((form, source + "x", text, ())),
        marshal.dumps((form, source, text, (("x",) * 7,))),
        marshal.dumps((form, source, text, (("^a", "gpu", "compute", "none", "transfer", ""),))),
    ):
        cache.write_bytes(broken)
        assert kernel_classes._bundled_rules(path) == expected


def test_a_cache_directory_that_cannot_be_written_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    path = bundled_classes_file()
    assert kernel_classes._bundled_rules(path) == load_class_file(path)
