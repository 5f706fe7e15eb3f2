"""Limits an upload is held to while it arrives: members and decompression ratio.

:mod:`hpcscope.serve.uploads` counts bytes; this module looks inside each file part as its
bytes arrive. A gzip part is decompressed on the fly (into nothing: only the count is kept,
in bounded steps, so a bomb never fills memory) and refused once it expands more than
``max_expansion_ratio`` times; a tar part (plain or gzip) has its member headers walked, and
every member counts towards ``max_members`` together with the uploaded files. The archive is
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


class TarWalker:
    """Counts the regular-file members of a tar stream from its 512-byte headers.

    Args:
        on_member: called once per regular file member.
    """

    def __init__(self, on_member: Callable[[], None]) -> None:
        self._on_member = on_member
        self._header = bytearray()
        self._skip = 0
        self.stopped = False

    def feed(self, data: bytes) -> None:
        """The next bytes of the (decompressed) tar stream."""
        view = memoryview(data)
        i = 0
        while i < len(view) and not self.stopped:
            if self._skip:
                step = min(self._skip, len(view) - i)
                self._skip -= step
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
        if block[156:157] in _REGULAR:
            self._on_member()
        self._skip = -(-size // _BLOCK) * _BLOCK


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
    """Watches one file part of an upload: gzip expansion and tar members.

    Args:
        name: the uploaded file name (for messages and to recognise tar archives).
        limits: the upload's limits.
        on_member: called per tar member (the upload counts them against ``max_members``).
    """

    def __init__(self, name: str, limits: UploadLimits, on_member: Callable[[], None]) -> None:
        self.name = name
        self.limits = limits
        self.compressed_bytes = 0
        self.expanded_bytes = 0
        self._start = b""
        self._mode: str | None = None  # "gzip", "tar", "plain", or "off" after a bad stream
        self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._tar: TarWalker | None = None
        self._on_member = on_member
        self._tar_named = name.lower().endswith(_TAR_SUFFIXES)

    def feed(self, data: bytes) -> None:
        """The next bytes of the part as sent.

        Raises:
            UploadError: 413 when the part expands past the ratio (members: the caller).
        """
        if self._mode is None:
            self._start += data
            if len(self._start) < _SNIFF_BYTES:
                return
            self._choose_mode()
            data, self._start = self._start, b""
        if self._mode == "gzip":
            self._inflate(data)
        elif self._mode == "tar" and self._tar is not None:
            self._tar.feed(data)

    def finish(self) -> None:
        """The part ended (a part shorter than the sniffing window is judged now)."""
        if self._mode is None:
            self._choose_mode()
            data, self._start = self._start, b""
            if data:
                self.feed(data)

    def _choose_mode(self) -> None:
        if self._start.startswith(_GZIP_MAGIC):
            self._mode = "gzip"
            if self._tar_named:
                self._tar = TarWalker(self._on_member)
        elif self._tar_named or self._start[257:262] == b"ustar":
            self._mode = "tar"
            self._tar = TarWalker(self._on_member)
        else:
            self._mode = "plain"

    def _inflate(self, data: bytes) -> None:
        self.compressed_bytes += len(data)
        pending = data
        while pending and self._mode == "gzip":
            try:
                out = self._inflater.decompress(pending, _STEP_BYTES)
            except zlib.error:
                self._mode = "off"  # corrupt: the analysis names the file and the offset
                return
            self.expanded_bytes += len(out)
            self._check_ratio()
            if self._tar is not None and out:
                self._tar.feed(out)
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
