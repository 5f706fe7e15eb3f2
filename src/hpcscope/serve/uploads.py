"""Streaming multipart uploads into a directory, with a size limit.

The request body is parsed as it arrives (python-multipart's push parser, fed off the event
loop), file parts are written straight to files in the target directory and other parts are
kept as small text fields. Nothing holds a whole upload in memory, and the limit is enforced
while the bytes arrive: the first byte over it aborts the upload (HTTP 413), and the caller
removes the directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from hpcscope.model.errors import InputError

#: Largest text field kept (job id, threshold...), bytes.
MAX_FIELD_BYTES = 4096
_SAFE = re.compile(r"[^A-Za-z0-9._+-]+")


class UploadError(InputError):
    """A malformed or oversized upload; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


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
    def __init__(self, directory: Path, max_bytes: int, max_files: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.total = 0
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
        if len(self.files) >= self.max_files:
            raise UploadError(f"at most {self.max_files} files per upload", 413)
        original = filename.decode("utf-8", "replace")
        path = self.directory / safe_name(original, self.taken)
        self._handle = path.open("wb")
        self.files.append((original, path))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._handle is not None:
            self.total += end - start
            if self.total > self.max_bytes:
                raise UploadError(f"the upload is larger than {self.max_bytes} bytes", 413)
            self._handle.write(data[start:end])
        elif self._text is not None:
            self._text += data[start:end]
            if len(self._text) > MAX_FIELD_BYTES:
                raise UploadError(f"field {self._name!r} is longer than {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
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
    request: Request, directory: Path, *, max_bytes: int, max_files: int = 4096
) -> tuple[list[tuple[str, Path]], dict[str, str]]:
    """Stream a ``multipart/form-data`` request into ``directory``.

    Returns:
        ``[(uploaded file name, saved path)]`` and the text fields.

    Raises:
        UploadError: not multipart, malformed, over ``max_bytes`` (413), too many files.
    """
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UploadError("send the traces as multipart/form-data", 415)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes + 1_000_000:
        raise UploadError(f"the upload is larger than {max_bytes} bytes", 413)
    receiver = _Receiver(directory, max_bytes, max_files)
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
