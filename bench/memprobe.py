"""Where a long-running demo's memory goes: a probe inside the server process, for the soak.

    PYTHONPATH=src:. .venv/bin/python -m bench.soak --probe /tmp/probe     # dumps at 0, 120, 600 s
    PYTHONPATH=src:. .venv/bin/python -m bench.memprobe diff /tmp/probe/120 /tmp/probe/600

``bench/soak.py --probe DIR`` starts the demo with ``bench/probe_site`` first on its path and
``HPCSCOPE_BENCH_PROBE=DIR``: that folder's ``sitecustomize`` calls :func:`start`, which starts
a thread that answers each ``DIR/dump-LABEL`` file the soak writes with ``DIR/LABEL.json``
(:func:`stats`: RSS by kind and by kind of mapping, glibc's arenas, Python's heap, pyarrow's
pool, the Arrow tables and polars frames alive and what holds the largest, DuckDB's
``duckdb_memory()``, the sizes of the server's caches, the most common object types not frozen,
the collector's pauses: :class:`GcPauses`). With ``HPCSCOPE_BENCH_PROBE_MEMRAY=1`` and memray
installed, memray tracks every allocation, C and C++ ones too, between the second and the third
dump (:data:`ENV_MEMRAY`): DuckDB's own heap, which no other figure here sees.
The first dump also starts :mod:`tracemalloc`
(``HPCSCOPE_BENCH_PROBE_FRAMES`` frames per allocation, 8 by default; 0: off), and every later
one writes ``DIR/LABEL.tracemalloc`` too: what was allocated since the first dump and is still
alive, so the diff of two later dumps is what grew between them (the demo's start-up, minutes
at 128 nodes, runs untraced: tracing it takes 3x as long). hpcscope never imports this module:
it is the bench's, and tracing slows the server (about 2x the CPU per allocation), so the
soak's figures of a probed run are not its figures.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import importlib
import json
import os
import sys
import threading
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ENV_DIR = "HPCSCOPE_BENCH_PROBE"
ENV_FRAMES = "HPCSCOPE_BENCH_PROBE_FRAMES"
#: Set (to anything), with memray installed (``pip install memray``): memray tracks the
#: allocations between the second and the third dump, C and C++ ones included, with their
#: native stacks (``DIR/memray.bin``, aggregated: what was allocated then and is still alive
#: at the third dump is ``memray table --leaks DIR/memray.bin``' answer).
ENV_MEMRAY = "HPCSCOPE_BENCH_PROBE_MEMRAY"
MIB = 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo() -> dict[str, float]:
    """glibc's ``mallinfo2``, in MiB: arenas (sbrk'd and mmap'd heaps), in use, free."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {
        "arena_mb": info.arena / MIB,
        "mmapped_mb": info.hblkhd / MIB,
        "in_use_mb": info.uordblks / MIB,
        "free_mb": info.fordblks / MIB,
        "top_releasable_mb": info.keepcost / MIB,
    }


def _smaps() -> dict[str, float]:
    """Resident MiB by kind of mapping (``/proc/self/smaps``): glibc's main heap, anonymous
    mappings of 64 MiB (glibc's other arenas reserve that much each), other anonymous ones
    (pymalloc's arenas, mimalloc's and DuckDB's allocations, mmap'd blocks), files, stacks."""
    kinds: collections.Counter[str] = collections.Counter()
    kind = ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            size_kb = (end - start) // 1024
            name = head[5] if len(head) > 5 else ""
            if name == "[heap]":
                kind = "heap"
            elif name.startswith("[stack"):
                kind = "stack"
            elif name.startswith("/"):
                kind = "file"
            elif name:
                kind = name
            elif size_kb == 65536:
                kind = "anon_64mib"
            elif size_kb >= 65536:
                kind = "anon_big"
            else:
                kind = "anon_small"
        elif head and head[0] == "Rss:":
            kinds[kind] += int(head[1])  # KiB
    return {k: round(v / 1024, 1) for k, v in kinds.most_common()}


def _arrow() -> dict[str, object]:
    """pyarrow's default memory pool: bytes it holds now and its peak, in MiB."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    return {
        "backend": pool.backend_name,
        "allocated_mb": pool.bytes_allocated() / MIB,
        "max_mb": pool.max_memory() / MIB,
    }


def _holder(obj: Any, skip: set[int], depth: int = 3) -> str:
    """A chain of the types that hold ``obj`` (its first referrers that are not frames or
    the probe's own lists), for naming what keeps a large buffer alive."""
    names: list[str] = []
    at = obj
    for _ in range(depth):
        owners = [
            r
            for r in gc.get_referrers(at)
            if id(r) not in skip and type(r).__name__ not in ("frame", "list_iterator")
        ]
        if not owners:
            break
        # a dict's owner names it better than the dict (an instance's, a module's globals)
        at = next((r for r in owners if not isinstance(r, dict)), owners[0])
        names.append(type(at).__name__ + (f"[{len(at)}]" if isinstance(at, dict) else ""))
    return " < ".join(names)


def _buffers(objects: list[Any]) -> dict[str, Any]:
    """The Arrow tables, batches and arrays and the polars frames alive (``objects``, the
    frozen ones included): count and MiB by type, and the largest tables with what holds
    them. DuckDB's Arrow answers are allocated by DuckDB with ``malloc`` (glibc's in-use heap,
    not tracemalloc's nor pyarrow's pool)."""
    import polars as pl
    import pyarrow as pa

    kinds = (pa.Table, pa.RecordBatch, pa.ChunkedArray, pa.Array, pl.DataFrame)
    held: dict[int, tuple[Any, Any]] = {}  # not tracked by the collector: found by holders
    for holder in objects:
        for obj in gc.get_referents(holder):
            if isinstance(obj, kinds) and id(obj) not in held:
                held[id(obj)] = (obj, holder)
    found: collections.Counter[str] = collections.Counter()
    sizes: collections.Counter[str] = collections.Counter()  # bytes
    tables: list[tuple[int, Any, Any]] = []  # bytes, the buffer, its holder
    for obj, holder in held.values():
        name = type(obj).__name__
        try:
            size = obj.estimated_size() if isinstance(obj, pl.DataFrame) else obj.nbytes
        except Exception:  # an array of a type whose size pyarrow does not compute
            continue
        found[name] += 1
        sizes[name] += int(size)
        tables.append((int(size), obj, holder))
    tables.sort(key=lambda t: -t[0])
    by_holder: collections.Counter[str] = collections.Counter()  # bytes
    skip = {id(objects), id(held), id(tables), *(id(t) for t in tables)}
    skip |= {id(pair) for pair in held.values()}
    for size, _, holder in tables[:300]:
        by_holder[type(holder).__name__ + " < " + _holder(holder, skip)] += size
    return {
        "count": dict(found),
        "mb": {k: round(v / MIB, 1) for k, v in sizes.items()},
        "largest_tables_mb_by_holder": {k: round(v / MIB, 1) for k, v in by_holder.most_common(15)},
    }


def _status() -> dict[str, float]:
    """``/proc/self/status``'s memory lines, in MiB."""
    wanted = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmData", "Threads")
    found: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in wanted:
            number = float(value.split()[0])
            found[key] = number if key == "Threads" else number / 1024
    return found


def _services() -> list[Any]:
    """The :class:`~hpcscope.service.core.Service` objects the threads' frames hold (the
    demo's serving frame does): found without :func:`gc.get_objects`, which does not list
    the heap the server froze (``serve/heap.py``), and without unfreezing it."""
    from hpcscope.service.core import Service

    found: dict[int, Any] = {}
    for frame in sys._current_frames().values():
        at: Any = frame
        while at is not None:
            for value in list(at.f_locals.values()):
                if isinstance(value, Service):
                    found[id(value)] = value
            at = at.f_back
    return list(found.values())


def _pymalloc() -> dict[str, float]:
    """pymalloc's arenas (``sys._debugmallocstats``, written to fd 2 while it runs)."""
    import tempfile

    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found: dict[str, float] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip("# ").strip(), value.strip().replace(",", "")
        if value.isdigit() and key.startswith(("arenas", "bytes in")):
            found[key] = int(value) if key.startswith("arenas") else int(value) / MIB
        elif key == "Total" and value.isdigit() and "arenas_mb" not in found:
            found["arenas_mb"] = int(value) / MIB  # the first Total: the arenas' bytes
    return found


def _duckdb(services: list[Any]) -> list[dict[str, Any]]:
    """Each open store's ``duckdb_memory()`` (MiB by tag), memory limit and database size."""
    answers: list[dict[str, Any]] = []
    for store in [service.store for service in services]:
        try:
            tags = store.query("SELECT tag, memory_usage_bytes FROM duckdb_memory()").to_pylist()
            limit = store.query(
                "SELECT current_setting('memory_limit') AS m, current_setting('threads') AS t"
            ).to_pylist()
            size = store.query("PRAGMA database_size").to_pylist()
            # what the pages list grows with: the last hour's collection gaps, by reason
            gaps = store.query(
                "SELECT reason, count(*) AS n FROM collection_gaps"
                " WHERE end_ts >= ? GROUP BY reason ORDER BY n DESC",
                [datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)],
            ).to_pylist()
        except Exception as exc:  # a closed store: say so, go on
            answers.append({"path": store.path, "error": repr(exc)})
            continue
        answers.append(
            {
                "path": store.path,
                "memory_mb": {
                    r["tag"]: round(r["memory_usage_bytes"] / MIB, 1)
                    for r in tags
                    if r["memory_usage_bytes"]
                },
                "settings": limit,
                "database_size": size,
                "gaps_last_hour": {str(r["reason"])[:60]: r["n"] for r in gaps[:5]},
            }
        )
    return answers


def _caches(services: list[Any]) -> dict[str, Any]:
    """The sizes of the server's caches that a soak could fill."""
    found: dict[str, Any] = {}
    from hpcscope.service.alerts import documents as alert_documents
    from hpcscope.store import alerts as store_alerts
    from hpcscope.store import job_documents

    found["alert_bytes"] = alert_documents._FRAGMENTS.info()
    found["row_alerts"] = store_alerts._ROW_ALERTS.info()
    found["job_documents"] = [
        {"entries": len(m.bodies), "mb": round(m.bytes / MIB, 1)}
        for m in list(job_documents._MEMORY.values())
    ]
    snapshots = [service.snapshots for service in services]
    found["snapshots"] = []
    for s in snapshots:
        with s._lock:  # the serving threads change it meanwhile
            entries = list(s._entries.items())
        kinds: collections.Counter[str] = collections.Counter()
        kept: collections.Counter[str] = collections.Counter()
        for k, entry in entries:
            family = k.family if type(k).__name__ == "_Versioned" else k
            kind = (
                type(k).__name__
                + ":"
                + (str(family[0]) if isinstance(family, tuple) and family else "")
            )
            kinds[kind] += 1
            kept[kind] += entry.size
        found["snapshots"].append(
            {
                "entries": len(s),
                "kept_mb": round(s.kept_bytes / MIB, 1),
                "ahead": len(s._ahead),
                "families": len(s._families),
                "by_key": dict(kinds.most_common(40)),
                "kept_kb_by_key": {k: round(v / 1024) for k, v in kept.most_common(40)},
            }
        )
    return found


class GcPauses:
    """The collector's pauses by generation (a :data:`gc.callbacks` hook): collections,
    milliseconds in all and the longest, since start and since the last dump; the heap
    settles' own collections (``serve/heap.py``) are among them."""

    def __init__(self) -> None:
        self._started = 0.0
        self._lock = threading.Lock()
        self.total: dict[int, list[float]] = {g: [0, 0.0, 0.0] for g in range(3)}
        self.recent: dict[int, list[float]] = {g: [0, 0.0, 0.0] for g in range(3)}

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started) * 1000
        with self._lock:
            for figures in (self.total[info["generation"]], self.recent[info["generation"]]):
                figures[0] += 1
                figures[1] += ms
                figures[2] = max(figures[2], ms)

    def read(self) -> dict[str, Any]:
        """The figures (``[collections, ms, longest ms]`` by generation); recent ones reset."""
        with self._lock:
            answer = {
                "since_start": {g: [round(x, 1) for x in f] for g, f in self.total.items()},
                "since_last_dump": {g: [round(x, 1) for x in f] for g, f in self.recent.items()},
            }
            self.recent = {g: [0, 0.0, 0.0] for g in range(3)}
        return answer


PAUSES = GcPauses()


def stats() -> dict[str, Any]:
    """Everything :func:`dump` writes besides the snapshot (module docstring)."""
    started = time.perf_counter()
    pauses = PAUSES.read()
    objects = gc.get_objects()
    types = collections.Counter(type(o).__name__ for o in objects)
    traced, peak = tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else (0, 0)
    answer: dict[str, Any] = {
        "status_mb": _status(),
        "mallinfo": _mallinfo(),
        "smaps_mb": _smaps(),
        "arrow": _arrow(),
        "python": {
            "allocated_blocks": sys.getallocatedblocks(),
            "gc_objects": len(objects),  # the frozen ones not counted
            "pymalloc": _pymalloc(),
            "gc_frozen": gc.get_freeze_count(),
            # the collector's counters, each generation's collections so far and the oldest
            # generation's objects (not frozen): cyclic garbage waits there until its next
            # collection, which comes once it has grown by a quarter of what the last one kept
            "gc_count": gc.get_count(),
            "gc_gen2_objects": len(gc.get_objects(generation=2)),
            "gc_stats": gc.get_stats(),
            "gc_pauses_ms": pauses,
            "traced_mb": traced / MIB,
            "traced_peak_mb": peak / MIB,
            "tracemalloc_own_mb": tracemalloc.get_tracemalloc_memory() / MIB,
        },
        "types": dict(types.most_common(40)),
        "threads": sorted(t.name for t in threading.enumerate()),
    }
    gc.unfreeze()  # the buffers of the frozen heap too; the server settles again later
    try:
        answer["buffers"] = _buffers(gc.get_objects())
    except Exception as exc:  # a probe reports what it can
        answer["buffers"] = repr(exc)
    finally:
        gc.freeze()
    del objects
    services = _services()
    for name, part in (("duckdb", _duckdb), ("caches", _caches)):
        try:
            answer[name] = part(services)
        except Exception as exc:  # a probe reports what it can
            answer[name] = repr(exc)
    answer["probe_seconds"] = round(time.perf_counter() - started, 2)
    return answer


class _Memray:
    """memray's tracker from the second dump to the third (:data:`ENV_MEMRAY`)."""

    def __init__(self) -> None:
        self.dumps = 0
        self.tracker: Any = None

    def at_dump(self, folder: Path) -> None:
        if not os.environ.get(ENV_MEMRAY):
            return
        self.dumps += 1
        if self.dumps == 2:
            # not a dependency of hpcscope nor of its benches: `pip install memray` to probe
            memray = importlib.import_module("memray")
            self.tracker = memray.Tracker(
                str(folder / "memray.bin"),
                native_traces=True,
                file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS,
            )
            self.tracker.__enter__()
        elif self.dumps == 3 and self.tracker is not None:
            self.tracker.__exit__(None, None, None)
            self.tracker = None


MEMRAY = _Memray()


def dump(folder: Path, label: str, frames: int) -> None:
    """Write ``LABEL.json`` (:func:`stats`) and, when tracing, ``LABEL.tracemalloc``; the
    first dump starts tracing (module docstring)."""
    MEMRAY.at_dump(folder)
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(str(folder / f"{label}.tracemalloc"))
    (folder / f"{label}.json").write_text(json.dumps(stats(), indent=1, default=str))
    if frames and not tracemalloc.is_tracing():
        tracemalloc.start(frames)


def _watch(folder: Path, frames: int) -> None:
    while True:
        for request in sorted(folder.glob("dump-*")):
            label = request.name.removeprefix("dump-")
            try:
                request.unlink()
            except FileNotFoundError:  # another process took it
                continue
            try:
                dump(folder, label, frames)
            except Exception as exc:  # the soak reads the error in the file
                (folder / f"{label}.json").write_text(json.dumps({"error": repr(exc)}))
        time.sleep(0.5)


def start() -> None:
    """Answer dump requests (module docstring); called by the demo's ``sitecustomize`` when
    :data:`ENV_DIR` is set."""
    folder = Path(os.environ.pop(ENV_DIR))  # this process only: not the twin it starts
    folder.mkdir(parents=True, exist_ok=True)
    frames = int(os.environ.get(ENV_FRAMES, "8"))
    gc.callbacks.append(PAUSES)
    threading.Thread(
        target=_watch, args=(folder, frames), name="bench-memprobe", daemon=True
    ).start()


def request_dump(folder: Path, label: str) -> None:
    """Ask the probed process for a dump labelled ``label`` (the soak's side)."""
    (folder / f"dump-{label}").touch()


def diff(before: Path, after: Path, *, top: int, key: str) -> None:
    """Print the ``top`` growths from ``before`` to ``after`` (tracemalloc snapshots, by
    ``key``: ``lineno``, ``filename``, ``traceback``, or ``site``: the innermost frame in
    hpcscope) and the two stats files' headlines."""
    for path in (before, after):
        figures = json.loads(path.with_suffix(".json").read_text())
        print(
            path.name,
            json.dumps({k: figures.get(k) for k in ("status_mb", "mallinfo", "smaps_mb", "arrow")}),
        )
        print("  python", json.dumps(figures.get("python")))
        print("  duckdb", json.dumps(figures.get("duckdb"))[:1500])
        print("  caches", json.dumps(figures.get("caches"))[:1500])
    old = tracemalloc.Snapshot.load(str(before.with_suffix(".tracemalloc")))
    new = tracemalloc.Snapshot.load(str(after.with_suffix(".tracemalloc")))
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    old, new = old.filter_traces(ignore), new.filter_traces(ignore)
    if key == "site":
        _by_site(old, new, top)
        return
    stats_ = new.compare_to(old, key)
    total = sum(s.size_diff for s in stats_)
    print(f"traced growth {total / MIB:+.1f} MiB")
    for stat in stats_[:top]:
        print(f"{stat.size_diff / MIB:+8.2f} MiB {stat.count_diff:+8d} blocks")
        lines = stat.traceback.format(limit=8 if key == "traceback" else 1)
        for line in lines:
            print("      " + line)


def _site(trace: tracemalloc.Trace) -> str:
    """The innermost frame of ``trace`` in hpcscope's own code (else its innermost frame)."""
    frames = list(trace.traceback)  # oldest first
    for frame in reversed(frames):
        if "/hpcscope/" in frame.filename:
            return f"{frame.filename.split('/hpcscope/', 1)[1]}:{frame.lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _by_site(old: tracemalloc.Snapshot, new: tracemalloc.Snapshot, top: int) -> None:
    """Growth grouped by :func:`_site`."""
    sizes: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for sign, snapshot in ((-1, old), (1, new)):
        for trace in snapshot.traces:
            site = _site(trace)
            sizes[site] += sign * trace.size
            counts[site] += sign
    print(f"traced growth {sum(sizes.values()) / MIB:+.1f} MiB")
    for site, size in sorted(sizes.items(), key=lambda kv: -abs(kv[1]))[:top]:
        print(f"{size / MIB:+8.2f} MiB {counts[site]:+8d} blocks  {site}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("diff", help="growth between two dumps (paths without suffix)")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    compare.add_argument("--top", type=int, default=25)
    compare.add_argument(
        "--key", choices=("lineno", "filename", "traceback", "site"), default="lineno"
    )
    args = parser.parse_args(argv)
    diff(args.before, args.after, top=args.top, key=args.key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
