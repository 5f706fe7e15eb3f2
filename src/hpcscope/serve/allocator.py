"""The serving process's C allocator: freed memory goes back to the system.

Memory that CPython frees (objects over 512 bytes, buffers, response bodies) goes to the C
library's ``malloc``. With glibc's defaults, a long-running server's resident memory grows
though what it holds does not:

- every thread that allocates while another holds an arena's lock gets an arena of its own,
  up to eight per core, and the free space of each one is kept for it;
- the threshold above which a block is its own ``mmap`` (given back on ``free``) rises to the
  size of every such block freed, up to 32 MiB, so a server's large transient buffers (a
  1,024-GPU scrape round's pages, a job list's JSON) end up in the arenas, where freed space is
  fragmented and rarely given back.

Measured under the soak (``bench/soak.py``: the 128-node twin collected, 50 clients, 360 s;
``docs/benchmarks.md``, "API load and soak"): glibc's arenas grew 178 -> 216 MiB while 81-113
MiB of them were in use (91-132 MiB free and kept), and the server's RSS grew 31 % end over
start. With two arenas and a fixed 128 KiB threshold, the arenas held 97-104 MiB (15-22 MiB
free) and RSS 7.5 %.

:func:`tune_allocator` sets these with ``mallopt(3)``. The serving commands (``hpcscope serve``,
``hpcscope demo``) call it first, before :meth:`Service.open` starts the store's writer thread:
an arena made before the call stays. glibc's own environment variables
(``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``), when set, win: the site's choice is kept.
On another C library it does nothing.

Freed space inside the arenas stays resident until glibc hands it back, which it does only at
the top of the main arena. :func:`trim_allocator` (``malloc_trim(0)``) gives back every free
page of every arena; the server calls it after each settle of its heap (``serve/heap.py``), when
the collector has just freed what was cyclic garbage.

Written by hand with :mod:`ctypes`: no maintained package wraps ``mallopt``, and the call is
three lines.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

#: ``mallopt`` parameters, from glibc's ``malloc.h``.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

#: Arenas at most: the server runs Python on one thread at a time (the GIL) and on two
#: cores in the measured set-up; more arenas only keep more free space.
ARENA_MAX = 2
#: Blocks of this size and over are their own ``mmap``, given back when freed; setting it
#: also turns off glibc's raising of it (``mallopt(3)``).
MMAP_THRESHOLD_BYTES = 128 * 1024

#: Each parameter, glibc's environment variable for it (set, it wins over this module), and
#: the value set here.
SETTINGS = (
    (M_ARENA_MAX, "MALLOC_ARENA_MAX", ARENA_MAX),
    (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD_BYTES),
)


def _glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (``gnu_get_libc_version`` and ``mallopt``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def tune_allocator() -> dict[str, int]:
    """Set glibc's arena count and mmap threshold (module docstring); returns what was set,
    by environment variable name (empty on another C library, or where the site set them)."""
    libc = _glibc()
    if libc is None:
        return {}
    applied: dict[str, int] = {}
    for parameter, name, value in SETTINGS:
        if name in os.environ:
            continue
        if libc.mallopt(ctypes.c_int(parameter), ctypes.c_int(value)) == 1:  # 1: success
            applied[name] = value
        else:
            log.warning("mallopt(%s, %d) refused", name, value)
    log.debug("allocator tuned: %s", applied)
    return applied


def trim_allocator() -> bool:
    """Give the arenas' free pages back to the system (``malloc_trim(0)``, module docstring);
    whether glibc gave any back (False on another C library)."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return False
    return bool(libc.malloc_trim(ctypes.c_size_t(0)))
