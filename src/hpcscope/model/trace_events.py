"""Columnar event tables of one rank's PyTorch profiler (Kineto) trace.

The parser (:mod:`hpcscope.ingest.traces.kineto`) fills these; the analyses
(:mod:`hpcscope.analysis.step_phases`, :mod:`hpcscope.analysis.traces.stragglers`) read them.
Columns are numpy arrays, not Arrow or Polars: a rank's table is built and analysed inside a worker
process that never imports pyarrow (84 MB resident on import) or polars (59 MB), which is what
keeps peak memory a fraction of HolisticTraceAnalysis' (see ``bench/traces_vs_hta.py``).
:meth:`EventTable.to_arrow` gives the Arrow view where one is wanted (storage, notebooks).

Times are microseconds on the rank's own clock (Kineto's ``ts``/``dur``), as float64: clocks of
different nodes are never compared directly (see the barrier-wait method in
``docs/traces.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]


class EventKind(IntEnum):
    """What an ``X`` (complete) event of a Kineto trace is."""

    CPU_OP = 0  #: ``cpu_op``: an ATen/c10d operator on a CPU thread
    ANNOTATION = 1  #: ``user_annotation``: record_function ranges, ProfilerStep#N, nccl:*, gloo:*
    KERNEL = 2  #: ``kernel``: a GPU kernel on a stream
    MEMCPY = 3  #: ``gpu_memcpy``
    MEMSET = 4  #: ``gpu_memset``
    RUNTIME = 5  #: ``cuda_runtime`` / ``cuda_driver``: a launch on a CPU thread
    GPU_ANNOTATION = 6  #: ``gpu_user_annotation``: a record_function range mirrored on a stream
    #: ``python_function`` named ``Python GC``: a garbage collection (recorded with
    #: ``_ExperimentalConfig(record_python_gc_info=True)`` and ``with_stack=True``); other
    #: Python frames are not kept
    PYTHON_GC = 7


GPU_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)


@dataclass(frozen=True, slots=True)
class EventTable:
    """All complete events of one rank, one row per event, in file order.

    Attributes:
        kind: :class:`EventKind` codes.
        name: index into :attr:`names`.
        thread: CPU thread id for CPU events, stream id for GPU events (see ``kind``).
        ts_us / dur_us: start and duration, microseconds, rank-local clock.
        correlation: launch/kernel correlation id (``args.correlation``), -1 when absent.
        group: index into :attr:`groups` (``args["Process Group Name"]``), -1 when absent.
        names / groups: the interned strings.
    """

    kind: I8
    name: I32
    thread: I64
    ts_us: F64
    dur_us: F64
    correlation: I64
    group: I32
    names: tuple[str, ...]
    groups: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def to_arrow(self) -> Any:
        """The table as a ``pyarrow.Table`` with string columns decoded (imports pyarrow)."""
        import pyarrow as pa

        names = pa.array(self.names, pa.string())
        groups = pa.array(self.groups or ("",), pa.string())
        return pa.table(
            {
                "kind": pa.array(self.kind),
                "name": pa.DictionaryArray.from_arrays(pa.array(self.name), names),
                "thread": pa.array(self.thread),
                "ts_us": pa.array(self.ts_us),
                "dur_us": pa.array(self.dur_us),
                "correlation": pa.array(self.correlation),
                "group": pa.DictionaryArray.from_arrays(
                    pa.array(np.where(self.group < 0, 0, self.group)), groups
                ),
            }
        )


@dataclass(frozen=True, slots=True)
class RankTrace:
    """One rank's parsed trace: where it came from, its metadata and its events.

    Attributes:
        source: the file (a path, or ``archive.tar.gz:member``).
        rank: global rank, from ``distributedInfo.rank`` or the file name.
        rank_from: ``"distributedInfo"`` or ``"file name"``.
        world_size: ``distributedInfo.world_size`` when present.
        backend: ``distributedInfo.backend`` (nccl, gloo...) when present.
        main_thread: the thread that holds ``ProfilerStep#N`` (the training loop).
        events: the event table.
        problems: what was wrong with the file but did not stop parsing (a truncated
            file keeps every event read before the cut): each names the position.
        bytes_read: uncompressed JSON bytes read.
        device: the GPU model (``deviceProperties``), when the trace has GPUs.
        gpu_index: the CUDA device index its kernels ran on (``args.device``, the most common
            one): an index among the GPUs visible to the process (``CUDA_VISIBLE_DEVICES``).
        metadata: ``distributedInfo``, ``schemaVersion``, ``host_name``,
            ``baseTimeNanoseconds`` when present.
    """

    source: str
    rank: int
    rank_from: str
    world_size: int | None
    backend: str | None
    events: EventTable
    problems: tuple[str, ...] = ()
    bytes_read: int = 0
    device: str | None = None
    gpu_index: int | None = None
    metadata: dict[str, object] = field(default_factory=dict)
