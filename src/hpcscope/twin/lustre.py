"""Lustre job_stats of the twin's storage servers, as ``lctl get_param`` prints them.

A site that sets ``lctl set_param -P jobid_var=SLURM_JOB_ID jobid_name=%j:%u:%H`` gets, on each
Lustre server, one job_stats entry per (Slurm job, uid, client node) and target. hpcscope reads
them from a spool directory where a cron job or a systemd timer on each server drops the output
of ``lctl get_param obdfilter.*.job_stats mdt.*.job_stats``; the twin writes that directory:

    <spool_dir>/<server>.job_stats     oss1, oss2, ... (OSTs) and mds1 (the MDT)

Layout: Lustre 2.14+'s, byte for byte as the whamcloud sample in ``tests/fixtures/lustre/``
(``obdfilter.<target>.job_stats=``, then one ``- job_id:`` entry of counters per job id).

Semantics kept from Lustre: counters are cumulative per entry and only grow; ``snapshot_time``
is the entry's latest update (not the time of the read) and ``elapsed_time`` is snapshot minus
start; an entry is created by its first operation on the target and dropped
``job_cleanup_interval`` (600 s) after its latest update, so a job's entries vanish 600 s after
its last I/O (its end, or its GPU fault for a job that hangs). Latencies are in microseconds,
``read_bytes``/``write_bytes`` carry a power-of-two histogram (bucket = the size rounded up).

The I/O model: every running job reads its dataset striped over :data:`STRIPE_COUNT` OSTs at
:data:`~hpcscope.twin.workloads.STORAGE_READ_BYTES_PER_SECOND` per GPU (read latency
:data:`~hpcscope.twin.workloads.STORAGE_READ_LATENCY_SECONDS`: the data-starved job's ~25x),
appends to its logs, writes a checkpoint every :data:`CHECKPOINT_INTERVAL_SECONDS` (never on the
topology's ``dataset_targets``) and opens, stats and closes files on the MDT. Counts are Poisson
draws from one generator seeded by the twin's seed: same seed and tick times, same files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcscope.model.topology import Topology
from hpcscope.twin.mapping import write_text_atomic
from hpcscope.twin.scheduler import SimJob, user_uid
from hpcscope.twin.workloads import (
    STORAGE_READ_BYTES_PER_SECOND,
    STORAGE_READ_LATENCY_SECONDS,
    Profile,
)

#: Lustre's default ``job_cleanup_interval``: an entry idle this long is dropped.
JOB_CLEANUP_INTERVAL_SECONDS = 600.0
#: OSTs each simulated OSS serves (``oss1`` serves OST0000-OST0003, ...).
OSTS_PER_SERVER = 4
#: OSTs a job's dataset and checkpoint files are striped over (``lfs setstripe -c 4``).
STRIPE_COUNT = 4
#: A running job writes a checkpoint this often (simulated seconds since its start).
CHECKPOINT_INTERVAL_SECONDS = 1200.0
#: Checkpoint shard each GPU writes (model and optimizer state of its rank).
CHECKPOINT_BYTES_PER_GPU = 2 * 2**30
#: Checkpoints go out in full 16 MiB bulk RPCs (``brw_size=16``), as in the real sample.
CHECKPOINT_RPC_BYTES = 16 * 2**20
#: Log and metrics appends of a job, per node.
LOG_WRITES_PER_NODE_SECOND = 0.5

OST_OPERATIONS = (
    "read_bytes", "write_bytes", "read", "write", "getattr", "setattr", "punch", "sync",
    "destroy", "create", "statfs", "get_info", "set_info", "quotactl", "prealloc",
)  # fmt: skip
MDT_OPERATIONS = (
    "open", "close", "mknod", "link", "unlink", "mkdir", "rmdir", "rename", "getattr",
    "setattr", "getxattr", "setxattr", "statfs", "sync", "samedir_rename",
    "parallel_rename_file", "parallel_rename_dir", "crossdir_rename", "read", "write",
    "read_bytes", "write_bytes", "punch", "migrate",
)  # fmt: skip
BYTES_OPERATIONS = frozenset({"read_bytes", "write_bytes"})

_KIB = 2**10
_MIB = 2**20
#: Read RPC sizes (bytes, probability): sharded datasets stream in full RPCs; the data-starved
#: job reads small files (images, captions) in small RPCs.
_STREAMING_READS = ((1 * _MIB, 0.25), (4 * _MIB, 0.75))
_SMALL_FILE_READS = ((64 * _KIB, 0.35), (256 * _KIB, 0.40), (1 * _MIB, 0.25))
READ_SIZES: dict[Profile, tuple[tuple[int, float], ...]] = {
    Profile.HEALTHY: _STREAMING_READS,
    Profile.DATA_STARVED: _SMALL_FILE_READS,
    Profile.STRAGGLER: _STREAMING_READS,
    Profile.IDLE_ALLOCATED: _STREAMING_READS,
    Profile.FAILED: _STREAMING_READS,
}
#: Files opened per GPU per second (each open is a getattr of its stripes too).
OPENS_PER_GPU_SECOND: dict[Profile, float] = {
    Profile.HEALTHY: 0.5,
    Profile.DATA_STARVED: 40.0,
    Profile.STRAGGLER: 0.5,
    Profile.IDLE_ALLOCATED: 0.02,
    Profile.FAILED: 0.5,
}
_LOG_SIZES = ((4 * _KIB, 0.7), (64 * _KIB, 0.3))
#: Mean service times of the other operations, microseconds (server-side, as job_stats counts).
_LATENCY_USECS = {
    "write": 8000.0,
    "punch": 150.0,
    "sync": 3000.0,
    "ost_getattr": 40.0,
    "open": 250.0,
    "close": 40.0,
    "getattr": 60.0,
    "setattr": 150.0,
    "mkdir": 400.0,
    "statfs": 15.0,
}
_LATENCY_SIGMA = 0.6  # lognormal spread of service times
_DRAWS = 32  # service times drawn per batch of operations (sum and sumsq scale to the count)


@dataclass(frozen=True, slots=True)
class LustreTarget:
    """One OST or MDT and the server that serves it.

    Attributes:
        server: the server's short host name (``oss1``, ``mds1``): the spool file's name.
        name: ``<fsname>-OST<hex index>`` or ``<fsname>-MDT<hex index>``.
        component: ``ost`` or ``mdt``.
    """

    server: str
    name: str
    component: str

    @property
    def parameter(self) -> str:
        """The ``lctl`` parameter whose value the server prints (``obdfilter.X.job_stats``)."""
        prefix = "obdfilter" if self.component == "ost" else "mdt"
        return f"{prefix}.{self.name}.job_stats"

    @property
    def operations(self) -> tuple[str, ...]:
        return OST_OPERATIONS if self.component == "ost" else MDT_OPERATIONS


def server_layout(
    fsname: str,
    *,
    object_targets: int,
    metadata_targets: int = 1,
    osts_per_server: int = OSTS_PER_SERVER,
) -> tuple[LustreTarget, ...]:
    """The targets of a filesystem and their servers: ``osts_per_server`` OSTs per OSS, one
    MDT per MDS; target indices in hex as Lustre names them (``scratch-OST000a``)."""
    osts = tuple(
        LustreTarget(f"oss{i // osts_per_server + 1}", f"{fsname}-OST{i:04x}", "ost")
        for i in range(object_targets)
    )
    mdts = tuple(
        LustreTarget(f"mds{i + 1}", f"{fsname}-MDT{i:04x}", "mdt") for i in range(metadata_targets)
    )
    return osts + mdts


@dataclass
class OpCounter:
    """One operation's cumulative counters in one entry (Lustre's ``lprocfs_counter``)."""

    samples: int = 0
    minimum: int = 0
    maximum: int = 0
    total: int = 0
    squares: int = 0
    hist: dict[int, int] = field(default_factory=dict)

    def add(self, samples: int, total: int, squares: int, minimum: int, maximum: int) -> None:
        if samples <= 0:
            return
        first = self.samples == 0
        self.minimum = minimum if first else min(self.minimum, minimum)
        self.maximum = maximum if first else max(self.maximum, maximum)
        self.samples += samples
        self.total += total
        self.squares += squares


def _size_label(size: int) -> str:
    """A histogram bucket as Lustre labels it: ``4K``, ``1M``, ``2G`` (bytes below 1K bare)."""
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if size >= 1 << shift:
            return f"{size >> shift}{suffix}"
    return str(size)


def format_operation(name: str, unit: str, counter: OpCounter, *, hist: bool) -> str:
    """One operation line, padded exactly as ``lprocfs_jobstats_seq_show`` pads it."""
    line = (
        f"  {name + ':':<16} {{ samples: {counter.samples:>11}, unit: {unit:>5}, "
        f"min: {counter.minimum:>8}, max: {counter.maximum:>8}, sum: {counter.total:>16}, "
        f"sumsq: {counter.squares:>18}"
    )
    if hist:
        buckets = ", ".join(f"{_size_label(s)}: {n}" for s, n in sorted(counter.hist.items()))
        line += f", hist: {{ {buckets} }}"
    return line + " }\n"


def format_nanoseconds(nanoseconds: int) -> str:
    """``secs.nsecs`` as Lustre 2.14+ prints timestamps and durations."""
    return f"{nanoseconds // 1_000_000_000}.{nanoseconds % 1_000_000_000:09d} secs.nsecs"


@dataclass
class JobStatsEntry:
    """One job_stats entry: a job id on a target, with its counters."""

    job_id: str
    target: LustreTarget
    start_ns: int
    latest_ns: int
    ops: dict[str, OpCounter]

    def render(self) -> str:
        lines = [
            f"- {'job_id:':<16} {format_job_id(self.job_id)}\n",
            f"  {'snapshot_time:':<16} {format_nanoseconds(self.latest_ns)}\n",
            f"  {'start_time:':<16} {format_nanoseconds(self.start_ns)}\n",
            f"  {'elapsed_time:':<16} {format_nanoseconds(self.latest_ns - self.start_ns)}\n",
        ]
        for name in self.target.operations:
            unit = "bytes" if name in BYTES_OPERATIONS else "usecs"
            lines.append(
                format_operation(name, unit, self.ops[name], hist=name in BYTES_OPERATIONS)
            )
        return "".join(lines)


_PLAIN_JOB_ID = re.compile(r"[A-Za-z0-9_.-]+")


def format_job_id(job_id: str) -> str:
    """The ``job_id`` value: bare when it is a plain word (``SLURM_JOB10``, ``cp.0``), in double
    quotes when YAML needs them (``"41231:11893:gpu02"``, from ``jobid_name=%j:%u:%H``)."""
    return job_id if _PLAIN_JOB_ID.fullmatch(job_id) else f'"{job_id}"'


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


class LustreJobStats:
    """The job_stats of every target of a simulated Lustre filesystem.

    Args:
        targets: the filesystem's targets (:func:`server_layout`).
        seed: seeds the operation counts and service times.
        cleanup_interval_seconds: ``job_cleanup_interval``: idle entries are dropped after it.
        stripe_count: OSTs each job's files are striped over.
        read_only: OSTs no job writes (the datasets' pool): its writes go to its other stripes.
    """

    def __init__(
        self,
        targets: Sequence[LustreTarget],
        *,
        seed: int = 42,
        cleanup_interval_seconds: float = JOB_CLEANUP_INTERVAL_SECONDS,
        stripe_count: int = STRIPE_COUNT,
        read_only: Sequence[str] = (),
    ) -> None:
        self.targets = tuple(targets)
        self._osts = [t for t in self.targets if t.component == "ost"]
        self._mdts = [t for t in self.targets if t.component == "mdt"]
        if not self._osts or not self._mdts:
            raise ValueError("a Lustre filesystem needs at least one OST and one MDT")
        self.cleanup_interval_seconds = cleanup_interval_seconds
        self.stripe_count = max(1, min(stripe_count, len(self._osts)))
        self.read_only = frozenset(read_only)
        self._writable = [t for t in self._osts if t.name not in self.read_only]
        self._rng = np.random.default_rng([seed, 0x4C55535452])  # "LUSTR": its own stream
        self._entries: dict[tuple[str, str], JobStatsEntry] = {}
        self._last: float | None = None

    @classmethod
    def from_topology(cls, topology: Topology, *, seed: int = 42) -> LustreJobStats | None:
        """The filesystem of ``topology``'s storage section; None when it is not Lustre."""
        storage = topology.storage
        if storage.get("kind") != "lustre":
            return None
        targets = server_layout(
            str(storage["name"]),
            object_targets=int(storage["object_targets"]),
            metadata_targets=int(storage["metadata_targets"]),
        )
        return cls(targets, seed=seed, read_only=storage.get("dataset_targets") or ())

    @property
    def servers(self) -> tuple[str, ...]:
        """Server names in target order (OSSes first, then MDSes), each once."""
        return tuple(dict.fromkeys(t.server for t in self.targets))

    def entries(self) -> list[JobStatsEntry]:
        """The entries the servers hold now, in creation order."""
        return list(self._entries.values())

    # ------------------------------------------------------------------ simulation

    def advance(self, now: float, jobs: Iterable[SimJob]) -> None:
        """Count the I/O ``jobs`` did since the previous call, up to ``now`` (simulated epoch
        seconds), then drop the entries idle for longer than the cleanup interval.

        A job does I/O from its start until it ends or its GPU faults (a job hung in NCCL
        reads nothing); ``jobs`` may include ended ones (their last interval still counts).
        """
        previous = now if self._last is None else self._last
        if now > previous:
            for job in sorted(jobs, key=lambda j: j.job_id):
                self._job(job, previous, now)
            self._last = now
        elif self._last is None:
            self._last = now
        horizon = _ns(now - self.cleanup_interval_seconds)
        for key in [k for k, e in self._entries.items() if e.latest_ns < horizon]:
            del self._entries[key]

    def _job(self, job: SimJob, previous: float, now: float) -> None:
        if job.start_time is None:
            return
        stop = min(
            math.inf if job.end_time is None else job.end_time,
            math.inf if job.fault_time is None else job.fault_time,
        )
        low, high = max(previous, job.start_time), min(now, stop)
        if high <= low:
            return
        interval = CHECKPOINT_INTERVAL_SECONDS
        checkpoints = math.floor((high - job.start_time) / interval) - math.floor(
            (low - job.start_time) / interval
        )
        per_node: dict[str, int] = {}
        for node, _gpu in job.allocation:
            per_node[node] = per_node.get(node, 0) + 1
        uid = user_uid(job.user)
        for node in sorted(per_node):
            self._node_io(
                job, f"{job.job_id}:{uid}:{node}", per_node[node], high - low, checkpoints,
                (_ns(low), _ns(high)),
            )  # fmt: skip

    def _stripes(self, job: SimJob) -> list[LustreTarget]:
        """The OSTs of the job's files: ``stripe_count`` consecutive OSTs from an offset that
        follows the job id, as Lustre's round-robin allocator spreads new files."""
        first = job.job_id % len(self._osts)
        return [self._osts[(first + k) % len(self._osts)] for k in range(self.stripe_count)]

    def _node_io(
        self,
        job: SimJob,
        job_id: str,
        gpus: int,
        seconds: float,
        checkpoints: int,
        span_ns: tuple[int, int],
    ) -> None:
        rng, profile = self._rng, job.profile
        osts = self._stripes(job)
        mdt = self._mdts[job.job_id % len(self._mdts)]
        # dataset reads, striped over the OSTs
        rate = STORAGE_READ_BYTES_PER_SECOND[profile] * gpus
        if rate > 0:
            sizes = READ_SIZES[profile]
            mean_size = sum(s * p for s, p in sizes)
            reads = int(rng.poisson(rate * seconds / mean_size))
            latency = STORAGE_READ_LATENCY_SECONDS[profile] * 1e6
            for ost, count in zip(
                osts, rng.multinomial(reads, [1 / len(osts)] * len(osts)), strict=True
            ):
                self._transfer(ost, job_id, "read", sizes, int(count), latency, span_ns)
        # log and metrics appends (one file, one stripe); nothing written to a read-only OST
        written = [t for t in osts if t.name not in self.read_only] or self._writable[:1]
        if profile is not Profile.IDLE_ALLOCATED:
            appends = int(rng.poisson(LOG_WRITES_PER_NODE_SECOND * seconds))
            latency = _LATENCY_USECS["write"] / 4
            self._transfer(written[0], job_id, "write", _LOG_SIZES, appends, latency, span_ns)
        # checkpoints: each GPU's shard in 16 MiB RPCs, the old file truncated (punch) and synced
        if checkpoints > 0 and profile is not Profile.IDLE_ALLOCATED:
            rpcs = CHECKPOINT_BYTES_PER_GPU * gpus * checkpoints // CHECKPOINT_RPC_BYTES
            shares = rng.multinomial(rpcs, [1 / len(written)] * len(written))
            for ost, count in zip(written, shares, strict=True):
                self._transfer(
                    ost, job_id, "write", ((CHECKPOINT_RPC_BYTES, 1.0),), int(count),
                    _LATENCY_USECS["write"], span_ns,
                )  # fmt: skip
                self._timed(ost, job_id, "punch", checkpoints, _LATENCY_USECS["punch"], span_ns)
                self._timed(ost, job_id, "sync", checkpoints, _LATENCY_USECS["sync"], span_ns)
            self._timed(mdt, job_id, "mkdir", checkpoints, _LATENCY_USECS["mkdir"], span_ns)
            for op in ("open", "close", "setattr"):
                self._timed(mdt, job_id, op, gpus * checkpoints, _LATENCY_USECS[op], span_ns)
        # metadata: opens (each with a glimpse getattr on its stripes), stats, statfs
        opens = int(rng.poisson(OPENS_PER_GPU_SECOND[profile] * gpus * seconds))
        for op in ("open", "close"):
            self._timed(mdt, job_id, op, opens, _LATENCY_USECS[op], span_ns)
        stats = int(rng.poisson(2 * OPENS_PER_GPU_SECOND[profile] * gpus * seconds))
        self._timed(mdt, job_id, "getattr", stats, _LATENCY_USECS["getattr"], span_ns)
        statfs = int(rng.poisson(seconds / 30.0))
        self._timed(mdt, job_id, "statfs", statfs, _LATENCY_USECS["statfs"], span_ns)
        for ost, count in zip(
            osts, rng.multinomial(opens, [1 / len(osts)] * len(osts)), strict=True
        ):
            self._timed(ost, job_id, "getattr", int(count), _LATENCY_USECS["ost_getattr"], span_ns)

    def write_burst(self, job: SimJob, node: str, target: str, nbytes: int, now: float) -> None:
        """``nbytes`` written by ``job`` from ``node`` to ``target`` over the last second, in
        full bulk RPCs, whatever the target (a live incident: a job writing a dataset's OST)."""
        ost = next(t for t in self._osts if t.name == target)
        job_id, span = f"{job.job_id}:{user_uid(job.user)}:{node}", (_ns(now - 1.0), _ns(now))
        rpcs, sizes = max(1, nbytes // CHECKPOINT_RPC_BYTES), ((CHECKPOINT_RPC_BYTES, 1.0),)
        self._transfer(ost, job_id, "write", sizes, rpcs, _LATENCY_USECS["write"], span)

    def _entry(self, target: LustreTarget, job_id: str, span_ns: tuple[int, int]) -> JobStatsEntry:
        key = (target.name, job_id)
        entry = self._entries.get(key)
        if entry is None:
            entry = JobStatsEntry(
                job_id,
                target,
                span_ns[0],
                span_ns[1],
                {op: OpCounter() for op in target.operations},
            )
            self._entries[key] = entry
        entry.latest_ns = max(entry.latest_ns, span_ns[1])
        return entry

    def _timed(
        self,
        target: LustreTarget,
        job_id: str,
        op: str,
        count: int,
        mean_usecs: float,
        span_ns: tuple[int, int],
    ) -> None:
        """``count`` operations with lognormal service times of mean ``mean_usecs``."""
        if count <= 0:
            return
        draws = min(count, _DRAWS)
        mu = math.log(mean_usecs) - _LATENCY_SIGMA**2 / 2
        values = np.maximum(1.0, np.rint(self._rng.lognormal(mu, _LATENCY_SIGMA, draws)))
        scale = count / draws
        self._entry(target, job_id, span_ns).ops[op].add(
            count,
            round(float(values.sum()) * scale),
            round(float((values * values).sum()) * scale),
            int(values.min()),
            int(values.max()),
        )

    def _transfer(
        self,
        target: LustreTarget,
        job_id: str,
        op: str,
        sizes: tuple[tuple[int, float], ...],
        count: int,
        mean_usecs: float,
        span_ns: tuple[int, int],
    ) -> None:
        """``count`` bulk RPCs of ``op`` (``read``/``write``): their sizes into
        ``<op>_bytes`` (exact sums and histogram) and their service times into ``op``."""
        if count <= 0:
            return
        counts = self._rng.multinomial(count, [p for _, p in sizes])
        used = [(size, int(n)) for (size, _), n in zip(sizes, counts, strict=True) if n > 0]
        counter = self._entry(target, job_id, span_ns).ops[f"{op}_bytes"]
        counter.add(
            count,
            sum(size * n for size, n in used),
            sum(size * size * n for size, n in used),
            min(size for size, _ in used),
            max(size for size, _ in used),
        )
        for size, n in used:
            counter.hist[size] = counter.hist.get(size, 0) + n
        self._timed(target, job_id, op, count, mean_usecs, span_ns)

    # ------------------------------------------------------------------ output

    def render(self, server: str) -> str:
        """What ``lctl get_param obdfilter.*.job_stats mdt.*.job_stats`` prints on ``server``."""
        parts: list[str] = []
        for target in self.targets:
            if target.server != server:
                continue
            parts.append(f"{target.parameter}=\njob_stats:\n")
            parts.extend(e.render() for e in self._entries.values() if e.target == target)
        return "".join(parts)

    def write(self, spool_dir: Path) -> list[Path]:
        """Replace ``<spool_dir>/<server>.job_stats`` of every server, each atomically."""
        spool_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for server in self.servers:
            path = spool_dir / f"{server}.job_stats"
            write_text_atomic(path, self.render(server))
            paths.append(path)
        return paths
