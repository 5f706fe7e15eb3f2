"""Which image of a process an event belongs to: the execs the sensor saw, and their argv.

Tetragon gives every exec its own ``exec_id`` (``node:exec time:pid``, base64), so a process
that execs twice (``bash -c 'bash -i >& /dev/tcp/...'`` connects in the first image, then
becomes the second) has two identities, and a connect chains to the image that made it.
The sensor reads ``/proc`` when a record arrives, but translates records 0.5 s later in
kernel order (``sensor_order.py``): by then ``/proc`` shows the last image. :class:`ExecImages`
keeps the last few images of each pid with their kernel exec time, and answers the image live
at an event's kernel time.

The argv of an image comes from the kernel (the program prints up to 512 bytes of the new
``mm``'s argument area, 64 bytes a line, ``%r``-escaped, before the exec's own line), so a
process gone before ``/proc`` is read (an ``nsenter`` refused at once) still has its
arguments; ``/proc/<pid>/cmdline`` is taken instead when it is whole and says the same.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from hpcscope.ingest.security.bpftrace import unescape_buffer
from hpcscope.service.security.sensor_procs import ProcessInfo

#: The program prints this many bytes of argv at most (8 lines of 64).
ARGV_BYTES = 512
_IMAGES_PER_PID = 4


@dataclass(frozen=True, slots=True)
class Image:
    """One image of a process: the kernel time of its exec (0: before any exec seen)."""

    exec_ns: int
    info: ProcessInfo


def arguments_of(argv: list[str]) -> str:
    """Tetragon's ``arguments``: argv after argv[0], space-joined."""
    return " ".join(argv[1:])


def merged_arguments(kernel: list[str], cut: bool, from_proc: str | None) -> str:
    """The kernel's argv, or ``/proc``'s arguments when they are the same, longer (the
    kernel's were cut at :data:`ARGV_BYTES`) or the kernel printed nothing."""
    mine = arguments_of(kernel)
    if from_proc is None:
        return mine
    if not kernel or (cut and from_proc.startswith(mine)) or from_proc == mine:
        return from_proc
    return mine


class ExecImages:
    """Exec images per pid (bounded), and the argv chunks of execs not yet complete."""

    def __init__(self, max_pids: int = 16_384) -> None:
        self._max_pids = max_pids
        self._images: OrderedDict[int, list[Image]] = OrderedDict()
        self._chunks: dict[tuple[int, int], dict[int, bytes]] = {}

    # ---------------------------------------------------------------- argv

    def add_chunk(self, tid: int, ns: int, index: int, text: str) -> None:
        """One ``A`` line: 64 bytes of the argv of the exec of ``tid`` at ``ns``."""
        self._chunks.setdefault((tid, ns), {})[index] = unescape_buffer(text)
        while len(self._chunks) > 4096:  # an exec line lost in the kernel: drop the oldest
            del self._chunks[next(iter(self._chunks))]

    def argv(self, tid: int, ns: int, length: int) -> tuple[list[str], bool]:
        """The argv of that exec (``length``: the kernel's argument area), and whether it
        was cut at :data:`ARGV_BYTES`."""
        chunks = self._chunks.pop((tid, ns), {})
        data = b"".join(chunks[i] for i in sorted(chunks))[: max(length, 0)]
        if data.endswith(b"\0"):
            data = data[:-1]
        argv = [a.decode("utf-8", "replace") for a in data.split(b"\0")] if data else []
        return argv, length > ARGV_BYTES

    # ---------------------------------------------------------------- images

    def add(self, pid: int, exec_ns: int, info: ProcessInfo, before: ProcessInfo | None) -> None:
        """An exec of ``pid`` at ``exec_ns`` (``before``: what was known of it before, kept as
        its image from 0 when it is the first exec seen)."""
        images = self._images.get(pid)
        if images is None or (images and images[-1].info.start_ns != info.start_ns):
            images = [Image(0, before)] if before is not None else []  # a new process
        images.append(Image(exec_ns, info))
        self._images[pid] = images[-_IMAGES_PER_PID:]
        self._images.move_to_end(pid)
        while len(self._images) > self._max_pids:
            self._images.popitem(last=False)

    def at(self, pid: int, ns: int | None, current: ProcessInfo) -> ProcessInfo | None:
        """The image of ``pid`` live at ``ns`` when it is not ``current`` (the last one
        read), None when ``current`` is right (or nothing is known)."""
        images = self._images.get(pid)
        if not images or ns is None or images[-1].info.start_ns != current.start_ns:
            return None
        live = None
        for image in images:
            if image.exec_ns <= ns:
                live = image
        if live is None or live is images[-1]:
            return None
        return live.info

    def first_exec_ns(self, pid: int, current: ProcessInfo) -> int | None:
        """The kernel time of the first exec seen of this process (None: none seen)."""
        images = self._images.get(pid)
        if not images or images[-1].info.start_ns != current.start_ns:
            return None
        execs = [image.exec_ns for image in images if image.exec_ns > 0]
        return execs[0] if execs else None
