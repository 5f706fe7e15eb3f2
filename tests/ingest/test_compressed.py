"""Hypothesis properties of the gzip reader: bounded reads, concatenated members, and every byte
that can be decompressed before a cut is handed back (then the cut is reported)."""

from __future__ import annotations

import gzip
import io
import zlib

import pytest
from fuzz.hostile import gzip_bomb
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.compressed import DEFLATE_ERRORS, Gunzip, gunzip_bytes, open_maybe_gzip
from hpcscope.model.bounds import BoundExceeded, ReadBounds


def _read_all(stream: Gunzip, block: int) -> tuple[bytes, Exception | None]:
    out = bytearray()
    while True:
        try:
            chunk = stream.read(block)
        except (EOFError, zlib.error) as exc:
            return bytes(out), exc
        assert len(chunk) <= block
        if not chunk:
            return bytes(out), None
        out += chunk


# Reads of at least 4 KiB: zlib hands the rest of its input back (``unconsumed_tail``) on every
# bounded call, so reading a few bytes at a time is quadratic; the parser reads 1 MiB blocks.
payloads = st.lists(st.binary(min_size=0, max_size=20_000), min_size=1, max_size=3)


@settings(max_examples=80, deadline=None)
@given(payloads, st.integers(4096, 70_000))
def test_whole_streams_read_back_exactly(parts: list[bytes], block: int) -> None:
    data = b"".join(gzip.compress(p) for p in parts)  # concatenated members
    out, error = _read_all(Gunzip(io.BytesIO(data)), block)
    assert error is None
    assert out == b"".join(parts)


@settings(max_examples=80, deadline=None)
@given(st.binary(min_size=1, max_size=50_000), st.floats(0.0, 0.999), st.integers(4096, 70_000))
def test_a_cut_keeps_a_prefix_and_is_reported(payload: bytes, where: float, block: int) -> None:
    data = gzip.compress(payload)
    cut = data[: int(len(data) * where)]
    out, error = _read_all(Gunzip(io.BytesIO(cut)), block)
    assert payload.startswith(out)
    assert error is not None or not cut


def test_plain_and_gzip_are_told_apart_by_content() -> None:
    assert open_maybe_gzip(io.BytesIO(b'{"a": 1}')).read(100) == b'{"a": 1}'
    assert open_maybe_gzip(io.BytesIO(gzip.compress(b'{"a": 1}'))).read(100) == b'{"a": 1}'


def test_highly_compressed_data_in_small_blocks() -> None:
    payload = b"\0" * (8 << 20) + b"end"  # ~1000:1, far more output than input per call
    lenient = ReadBounds(max_ratio=10_000.0)  # this test is about memory, not the ratio bound
    out, error = _read_all(Gunzip(io.BytesIO(gzip.compress(payload)), bounds=lenient), 4096)
    assert error is None and out == payload


@settings(max_examples=60, deadline=None)
@given(payloads)
def test_whole_file_decompression_reads_every_member(parts: list[bytes]) -> None:
    whole = b"".join(gzip.compress(p) for p in parts)
    assert gunzip_bytes(whole, source="test.gz") == b"".join(parts)


def test_whole_file_decompression_reports_a_cut_or_corruption() -> None:
    data = gzip.compress(bytes(range(256)) * 400)
    with pytest.raises(EOFError):
        gunzip_bytes(data[: len(data) // 2], source="test.gz")
    corrupt = bytearray(data)
    corrupt[20:40] = b"\xff" * 20
    with pytest.raises(DEFLATE_ERRORS):
        gunzip_bytes(bytes(corrupt), source="test.gz")


@pytest.mark.parametrize("reader", ["stream", "whole"])
def test_a_gzip_bomb_is_refused_after_its_ratio_naming_the_file(reader: str) -> None:
    bomb = gzip_bomb(64 << 10)  # 64 KiB expanding to 64 MiB

    def read() -> object:
        if reader == "stream":
            stream = open_maybe_gzip(io.BytesIO(bomb), source="bomb.gz")
            return _read_all(stream, 1 << 20)  # type: ignore[arg-type]
        return gunzip_bytes(bomb, source="bomb.gz")

    with pytest.raises(BoundExceeded) as refused:
        read()
    assert refused.value.bound == "ratio" and refused.value.source == "bomb.gz"
    assert "byte" in (refused.value.field or "")


def test_the_decompressed_size_is_bounded_too() -> None:
    data = gzip.compress(bytes(range(256)) * 8192)  # 2 MiB, a modest ratio
    with pytest.raises(BoundExceeded) as refused:
        gunzip_bytes(data, source="big.gz", bounds=ReadBounds(max_decompressed_bytes=1 << 20))
    assert refused.value.bound == "bytes"
