"""The spool reader every file source shares (``service/spool.py``): tails that read a backlog
over several polls and follow rotation, and snapshot directories that list what changed."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from hpcscope.service.spool import LineTail, SpoolFiles, Tails


def test_a_backlog_is_read_over_several_polls_without_losing_a_line(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    lines = [f"line {n:04d}".encode() for n in range(1, 401)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    tail = LineTail(path, max_bytes=1000)  # ~10 KiB of lines, 1 KB a poll
    seen: list[tuple[int, bytes]] = []
    polls = 0
    while len(seen) < len(lines):
        read = tail.read()
        seen += read.numbered()
        polls += 1
        assert polls < 100
    assert polls > 1 and seen == list(enumerate(lines, start=1))
    assert tail.read().lines == []


def test_text_gives_the_lines_back_as_the_file_holds_them(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\r\nb\nc")
    read = LineTail(path).read()
    assert read.text() == b"a\r\nb\n" and read.numbered() == [(1, b"a\r"), (2, b"b")]


def test_tails_keep_one_tail_per_path_and_forget_the_vanished(tmp_path: Path) -> None:
    one, two = tmp_path / "rank-0.jsonl", tmp_path / "rank-1.jsonl"
    one.write_bytes(b"a\n")
    two.write_bytes(b"x\ny\n")
    tails = Tails()
    assert tails.read(one).lines == [b"a"] and tails.read(two).numbered()[-1] == (2, b"y")
    with one.open("ab") as handle:
        handle.write(b"b\n")
    assert tails.read(one).numbered() == [(2, b"b")]
    tails.forget({two})
    assert tails.read(one).numbered() == [(1, b"a"), (2, b"b")]  # a new tail: from the start
    one.chmod(0)
    try:
        if os.geteuid() != 0:  # root reads anything
            with pytest.raises(PermissionError):
                Tails().read(one)
    finally:
        one.chmod(0o644)


def test_snapshot_files_list_what_changed_never_the_writers_temporaries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    files = SpoolFiles(spool, "*.job_stats")
    with caplog.at_level(logging.WARNING):
        assert files.changed() == [] and files.changed() == []
    assert [r.message for r in caplog.records] == [f"spool {spool} does not exist (yet)"]
    spool.mkdir()
    (spool / "oss1.job_stats").write_text("a")
    (spool / ".oss2.job_stats.tmp").write_text("half")  # renamed into place when complete
    (spool / "README").write_text("not a spool file")
    (spool / "sub.job_stats").mkdir()
    changed = files.changed()
    assert [path.name for path, _ in changed] == ["oss1.job_stats"]
    files.mark_read(*changed[0])
    assert files.changed() == []
    os.utime(spool / "oss1.job_stats", ns=(1, 2))
    (spool / "oss2.job_stats").write_text("b")
    assert [path.name for path, _ in files.changed()] == ["oss1.job_stats", "oss2.job_stats"]
    (spool / "oss1.job_stats").unlink()
    assert [path.name for path, _ in files.changed()] == ["oss2.job_stats"]
    nested = SpoolFiles(tmp_path / "procs", "*/compute-apps.csv")
    (tmp_path / "procs" / "gpu01").mkdir(parents=True)
    (tmp_path / "procs" / "gpu01" / "compute-apps.csv").write_text("x")
    assert [p.parent.name for p, _ in nested.files()] == ["gpu01"]
