"""Streaming multipart uploads into a directory, with size, member and expansion limits.

The request body is parsed as it arrives (python-multipart's push parser, fed off the event
loop), file parts are written straight to files in the target directory and other parts are
kept as small text fields. Nothing holds a whole upload in memory, and the limits
(:class:`~hpcscope.serve.upload_limits.UploadLimits`) are enforced while the bytes arrive: the
first byte over the size, the first member over the count, the first megabyte of a gzip part
past the expansion ratio aborts the upload (HTTP 413, naming the limit's setting), and the
caller removes the directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from hpcscope.serve.upload_limits import PartInspector, UploadError, UploadLimits

__all__ = ["MAX_FIELD_BYTES", "UploadError", "UploadLimits", "receive_files", "safe_name"]

#: Largest text field kept (job id, threshold...), bytes.
MAX_FIELD_BYTES = 4096
_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(filename: str, taken: set[str]) -> str:
    """A file name that cannot leave the directory: the base name only, unusual characters
    replaced, unique within the upload (``rank-0.json``, ``rank-0-2.json``...)."""
    base = _SAFE.sub("_", Path(filename.replace("\\", "/")).name).strip("._") or "trace"
    base = base[:160]
    name, counter = base, 1
    while name in taken:
        counter += 1
        stem, dot, rest = base.partition(".")
        name = f"{stem}-{counter}{dot}{rest}"
    taken.add(name)
    return name


class _Receiver:
    def __init__(self, directory: Path, limits: UploadLimits) -> None:
        self.directory = directory
        self.limits = limits
        self.max_bytes = limits.max_bytes
        self.total = 0
        self.members = 0
        self._inspector: PartInspector | None = None
        self.files: list[tuple[str, Path]] = []
        self.fields: dict[str, str] = {}
        self.taken: set[str] = set()
        self._headers: dict[bytes, bytes] = {}
        self._field = b""
        self._value = b""
        self._name = ""
        self._handle: IO[bytes] | None = None
        self._text: bytearray | None = None

    # python-multipart callbacks
    def on_part_begin(self) -> None:
        self._headers = {}
        self._handle = None
        self._text = None
        self._inspector = None

    def add_member(self) -> None:
        """One more file (an uploaded one or a tar member) against ``max_members``."""
        self.members += 1
        if self.members > self.limits.max_members:
            raise UploadError(
                f"more than {self.limits.max_members} files in one upload, tar members "
                "included (limit upload_max_members)",
                413,
            )

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field = self._value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename")
        self._name = name
        if filename is None:
            self._text = bytearray()
            return
        self.add_member()
        original = filename.decode("utf-8", "replace")
        self._inspector = PartInspector(original, self.limits, self.add_member)
        path = self.directory / safe_name(original, self.taken)
        self._handle = path.open("wb")
        self.files.append((original, path))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._handle is not None:
            self.total += end - start
            if self.total > self.max_bytes:
                raise UploadError(
                    f"the upload is larger than {self.max_bytes} bytes (limit upload_max_bytes)",
                    413,
                )
            chunk = data[start:end]
            if self._inspector is not None:
                self._inspector.feed(chunk)
            self._handle.write(chunk)
        elif self._text is not None:
            self._text += data[start:end]
            if len(self._text) > MAX_FIELD_BYTES:
                raise UploadError(f"field {self._name!r} is longer than {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._inspector is not None:
            self._inspector.finish()
            self._inspector = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        elif self._text is not None:
            self.fields[self._name] = self._text.decode("utf-8", "replace")
            self._text = None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


async def receive_files(
    request: Request, directory: Path, *, limits: UploadLimits
) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    """Stream a ``multipart/form-data`` request into ``directory``.

    Returns:
        ``[(uploaded file name, saved path)]`` and the text fields.

    Raises:
        UploadError: not multipart, malformed (400/415), over a limit (413, naming it).
    """
    max_bytes = limits.max_bytes
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UploadError("send the traces as multipart/form-data", 415)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + 1_000_000:
        raise UploadError(
            f"the upload is larger than {max_bytes} bytes (limit upload_max_bytes)", 413
        )
    receiver = _Receiver(directory, limits)
    callbacks = {
        name: getattr(receiver, name)
        for name in (
            "on_part_begin",
            "on_header_field",
            "on_header_value",
            "on_header_end",
            "on_headers_finished",
            "on_part_data",
            "on_part_end",
        )
    }
    parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
    try:
        async for chunk in request.stream():
            if chunk:
                await run_in_threadpool(parser.write, chunk)
        await run_in_threadpool(parser.finalize)
    except UploadError:
        raise
    except Exception as exc:  # python-multipart raises its own parse errors
        raise UploadError(f"malformed multipart body: {exc}") from None
    finally:
        receiver.close()
    return receiver.files, receiver.fields
