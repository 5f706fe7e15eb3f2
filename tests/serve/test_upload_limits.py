"""Upload limits judged while the bytes arrive: tar members, gzip expansion."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.serve.app import create_app
from hpcscope.serve.upload_limits import PartInspector, TarWalker, UploadError, UploadLimits
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from tests.conftest import basic_auth
from tests.support.paths import FIXTURES

HTA_2RANK = FIXTURES / "traces" / "hta_trace_filter_2rank"


def _tar(members: list[tuple[str, bytes]], *, fmt: int = tarfile.GNU_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        directory = tarfile.TarInfo("a-directory")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
    return buffer.getvalue()


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@settings(max_examples=40, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.text("abc/é", min_size=1, max_size=150).filter(lambda s: not s.endswith("/")),
            st.binary(max_size=2000),
        ),
        max_size=8,
    ),
    chunk=st.integers(1, 4096),
    fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
)
def test_the_walker_counts_what_tarfile_lists(
    members: list[tuple[str, bytes]], chunk: int, fmt: int
) -> None:
    data = _tar(members, fmt=fmt)
    seen: list[bytearray] = []

    def on_member(name: str) -> Callable[[bytes], None]:
        seen.append(bytearray())
        return seen[-1].extend

    walker = TarWalker(on_member)
    for piece in _chunks(data, chunk):
        walker.feed(piece)
    assert [bytes(b) for b in seen] == [content for _, content in members]


def _inspect(name: str, data: bytes, limits: UploadLimits, chunk: int = 65536) -> int:
    members: list[int] = []
    inspector = PartInspector(name, limits, lambda: members.append(1))
    for piece in _chunks(data, chunk):
        inspector.feed(piece)
    inspector.finish()
    return len(members)


def test_a_gzip_bomb_is_refused_early_in_the_stream() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20), 9)  # ~64 KB that expands 1000x
    fed: list[int] = []
    inspector = PartInspector("rank0.json.gz", UploadLimits(max_bytes=1 << 30), lambda: None)

    def feed_all() -> None:
        for piece in _chunks(bomb, 4096):
            fed.append(len(piece))
            inspector.feed(piece)

    with pytest.raises(UploadError) as caught:
        feed_all()
    assert caught.value.status == 413
    assert "upload_max_expansion_ratio" in caught.value.message
    assert "rank0.json.gz" in caught.value.message
    assert sum(fed) < len(bomb)  # before the end of the part
    assert inspector.expanded_bytes < 8 << 20  # bounded steps, not the whole 64 MiB


def test_real_compressed_traces_pass() -> None:
    for path in sorted(HTA_2RANK.iterdir()):
        assert _inspect(path.name, path.read_bytes(), UploadLimits(max_bytes=1 << 30)) == 0
    # PARAM's DLRM Kineto archive: 8 ranks, 0.47 MB expanding 15.7x
    archive = FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
    assert _inspect(archive.name, archive.read_bytes(), UploadLimits(max_bytes=1 << 30)) == 8


def test_members_of_a_compressed_tar_are_counted_and_multi_member_gzip_read() -> None:
    archive = gzip.compress(_tar([(f"rank-{i}.json", b"{}") for i in range(5)]))
    assert _inspect("ranks.tar.gz", archive, UploadLimits(max_bytes=1 << 30), chunk=100) == 5
    two = gzip.compress(b"{" * 10) + gzip.compress(b"}" * (3 << 20))
    with pytest.raises(UploadError):  # the second member is the bomb
        _inspect("x.json.gz", two, UploadLimits(max_bytes=1 << 30, max_expansion_ratio=50))


@pytest.mark.parametrize("compress", [False, True])
def test_a_bomb_inside_an_archive_is_refused(compress: bool) -> None:
    bomb = gzip.compress(b"\0" * (16 << 20))
    archive = _tar([("rank-0.json", b"{}"), ("rank-1.json.gz", bomb)])
    archive = gzip.compress(archive) if compress else archive
    with pytest.raises(UploadError) as caught:
        _inspect("ranks.tar.gz" if compress else "ranks.tar", archive, UploadLimits(1 << 30))
    assert "ranks.tar" in caught.value.message and "rank-1.json.gz" in caught.value.message
    assert "upload_max_expansion_ratio" in caught.value.message


def test_garbage_is_left_to_the_parser() -> None:
    corrupt = b"\x1f\x8b" + b"not deflate at all" * 100
    assert _inspect("bad.json.gz", corrupt, UploadLimits(max_bytes=1 << 30)) == 0


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        store_path=tmp_path / "s.duckdb",
        secret_key="t",
        upload_max_members=3,
        upload_max_expansion_ratio=20,
        upload_max_bytes=600_000,
    )
    service = Service.open(settings, users=UserDirectory.demo())
    with TestClient(create_app(service), headers=basic_auth("alice")) as client:
        yield client
    service.close()


def _post(client: TestClient, files: list[tuple[str, bytes]]) -> tuple[int, str]:
    response = client.post(
        "/api/traces",
        files=[("files", (name, data, "application/octet-stream")) for name, data in files],
    )
    return response.status_code, response.json().get("error", "")


def test_over_http_each_limit_is_413_naming_its_setting(limited: TestClient) -> None:
    members = gzip.compress(_tar([(f"r{i}.json", b"{}") for i in range(4)]))
    assert _post(limited, [("ranks.tar.gz", members)]) == (
        413,
        "more than 3 files in one upload, tar members included (limit upload_max_members)",
    )
    status, error = _post(limited, [("r.json.gz", gzip.compress(b" " * (4 << 20)))])
    assert status == 413 and "upload_max_expansion_ratio" in error
    status, error = _post(limited, [("big.json", b"x" * 700_000)])
    assert status == 413 and "upload_max_bytes" in error
    status, _ = _post(limited, [(p.name, p.read_bytes()) for p in sorted(HTA_2RANK.iterdir())])
    assert status == 201
