"""Limits an upload is held to while it arrives: members and decompression ratio.

:mod:`hpcscope.serve.uploads` counts bytes; this module looks inside each file part as its
bytes arrive. A gzip part is decompressed on the fly (into nothing: only the count is kept,
in bounded steps, so a bomb never fills memory) and refused once it expands more than
``max_expansion_ratio`` times; a tar part (plain or gzip) has its member headers walked, every
member counts towards ``max_members`` together with the uploaded files, and a gzip member is
held to the ratio on its own (a bomb inside an archive is a bomb too). The archive is
read again, for real, by the trace analysis: what fails to decompress or parse here is left to
that step, which names the file and position; this one only enforces limits.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

from hpcscope.model.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
_BLOCK = 512
#: Bytes looked at to tell gzip, tar and plain apart (the tar magic sits at 257).
_SNIFF_BYTES = 262
#: Ratios are judged once this much has been decompressed (a small file of spaces may
#: legitimately expand 1000x).
RATIO_FLOOR_BYTES = 1 << 20
#: Decompressed bytes produced per step (bounds memory whatever the ratio).
_STEP_BYTES = 1 << 20
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_REGULAR = (b"0", b"\0", b"7")


class UploadError(InputError):
    """A malformed or oversized upload; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """What one upload may hold.

    Attributes:
        max_bytes: all file parts together, as sent (``upload_max_bytes``).
        max_members: files plus tar members (``upload_max_members``).
        max_expansion_ratio: decompressed / compressed bytes of a gzip part
            (``upload_max_expansion_ratio``).
    """

    max_bytes: int
    max_members: int = 4096
    max_expansion_ratio: float = 200.0


MemberSink = Callable[[bytes], None]


class TarWalker:
    """Walks a tar stream by its 512-byte headers: counts regular-file members and hands each
    one's bytes to a sink.

    Args:
        on_member: called once per regular file member with its (header) name; returns a
            sink for the member's bytes, or None to skip them.
    """

    def __init__(self, on_member: Callable[[str], MemberSink | None]) -> None:
        self._on_member = on_member
        self._header = bytearray()
        self._payload = 0
        self._padding = 0
        self._sink: MemberSink | None = None
        self.stopped = False

    def feed(self, data: bytes) -> None:
        """The next bytes of the (decompressed) tar stream."""
        view = memoryview(data)
        i = 0
        while i < len(view) and not self.stopped:
            if self._payload:
                step = min(self._payload, len(view) - i)
                if self._sink is not None:
                    self._sink(bytes(view[i : i + step]))
                self._payload -= step
                i += step
                continue
            if self._padding:
                step = min(self._padding, len(view) - i)
                self._padding -= step
                i += step
                continue
            take = view[i : i + _BLOCK - len(self._header)]
            self._header += take
            i += len(take)
            if len(self._header) == _BLOCK:
                self._on_header(bytes(self._header))
                self._header.clear()

    def _on_header(self, block: bytes) -> None:
        if block.count(0) == _BLOCK:
            return  # end-of-archive padding
        size = _tar_size(block[124:136])
        if size is None:
            self.stopped = True  # not a tar header: the analysis reports what it is
            return
        self._sink = None
        if block[156:157] in _REGULAR:
            name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
            self._sink = self._on_member(name)
        self._payload = size
        self._padding = -size % _BLOCK


class _Inflation:
    """Counts what a gzip stream (members concatenated) expands to, in bounded steps, and
    refuses it past the ratio.

    Args:
        name: for the message (the uploaded file, or ``archive: member``).
        limits: ``max_expansion_ratio``.
        on_output: the decompressed bytes, step by step (a tar walker), or None.
    """

    def __init__(self, name: str, limits: UploadLimits, on_output: MemberSink | None) -> None:
        self.name = name
        self.limits = limits
        self.compressed_bytes = 0
        self.expanded_bytes = 0
        self.broken = False
        self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._on_output = on_output

    def feed(self, data: bytes) -> None:
        self.compressed_bytes += len(data)
        pending = data
        while pending and not self.broken:
            try:
                out = self._inflater.decompress(pending, _STEP_BYTES)
            except zlib.error:
                self.broken = True  # corrupt: the analysis names the file and the offset
                return
            self.expanded_bytes += len(out)
            self._check_ratio()
            if self._on_output is not None and out:
                self._on_output(out)
            pending = self._inflater.unconsumed_tail
            if self._inflater.eof:
                rest = self._inflater.unused_data
                if not rest.startswith(_GZIP_MAGIC):
                    return  # trailing garbage or padding: the parser decides
                self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # next member
                pending = rest

    def _check_ratio(self) -> None:
        if self.expanded_bytes <= RATIO_FLOOR_BYTES:
            return
        ratio = self.expanded_bytes / max(1, self.compressed_bytes)
        if ratio > self.limits.max_expansion_ratio:
            raise UploadError(
                f"{self.name}: expands more than {self.limits.max_expansion_ratio:g} times "
                f"({self.expanded_bytes} bytes from {self.compressed_bytes}; limit "
                "upload_max_expansion_ratio)",
                413,
            )


class _GzipSniffer:
    """A tar member's bytes: inflated under the ratio when they start as gzip."""

    def __init__(self, name: str, limits: UploadLimits) -> None:
        self._name = name
        self._limits = limits
        self._start = b""
        self._inflation: _Inflation | None = None
        self._plain = False

    def __call__(self, data: bytes) -> None:
        if self._plain:
            return
        if self._inflation is not None:
            self._inflation.feed(data)
            return
        self._start += data
        if len(self._start) < len(_GZIP_MAGIC):
            return
        if self._start.startswith(_GZIP_MAGIC):
            self._inflation = _Inflation(self._name, self._limits, None)
            self._inflation.feed(self._start)
        else:
            self._plain = True
        self._start = b""


def _tar_size(field: bytes) -> int | None:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.rstrip(b"\0 ").strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        return None


class PartInspector:
    """Watches one file part of an upload: gzip expansion, tar members, and gzip members of
    tars (each under the ratio on its own).

    Args:
        name: the uploaded file name (for messages and to recognise tar archives).
        limits: the upload's limits.
        on_member: called per tar member (the upload counts them against ``max_members``).
    """

    def __init__(self, name: str, limits: UploadLimits, on_member: Callable[[], None]) -> None:
        self.name = name
        self.limits = limits
        self._start = b""
        self._chosen = False
        self._inflation: _Inflation | None = None
        self._tar: TarWalker | None = None
        self._on_member = on_member
        self._tar_named = name.lower().endswith(_TAR_SUFFIXES)

    @property
    def expanded_bytes(self) -> int:
        """Decompressed bytes of a gzip part so far (0 for other parts)."""
        return self._inflation.expanded_bytes if self._inflation is not None else 0

    def feed(self, data: bytes) -> None:
        """The next bytes of the part as sent.

        Raises:
            UploadError: 413 when the part or a member expands past the ratio, or (from
                ``on_member``) when there are too many members.
        """
        if not self._chosen:
            self._start += data
            if len(self._start) < _SNIFF_BYTES:
                return
            self._choose()
            data, self._start = self._start, b""
        if self._inflation is not None:
            self._inflation.feed(data)
        elif self._tar is not None:
            self._tar.feed(data)

    def finish(self) -> None:
        """The part ended (a part shorter than the sniffing window is judged now)."""
        if not self._chosen:
            self._choose()
            data, self._start = self._start, b""
            if data:
                self.feed(data)

    def _member(self, member: str) -> MemberSink:
        self._on_member()
        return _GzipSniffer(f"{self.name}: {member}", self.limits)

    def _choose(self) -> None:
        self._chosen = True
        gzip = self._start.startswith(_GZIP_MAGIC)
        if self._tar_named or (not gzip and self._start[257:262] == b"ustar"):
            self._tar = TarWalker(self._member)
        if gzip:
            self._inflation = _Inflation(
                self.name, self.limits, self._tar.feed if self._tar is not None else None
            )
