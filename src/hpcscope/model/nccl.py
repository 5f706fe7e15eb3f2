"""Typed records of ``NCCL_DEBUG=INFO`` logs and the meaning of the codes NCCL prints.

NCCL prefixes every line with ``host:pid:tid [cudaDev]``; the record keeps that origin so
records of one process can be joined (the rank a process holds is printed on its ``Init``,
topology and ``Init timings`` lines). Bandwidths NCCL prints in GB/s are stored in bytes per
second, times in seconds.

Code tables follow the public headers: ``ncclResult_t`` (``nccl.h``), ``ibv_wc_status`` and
``ibv_event_type`` (rdma-core ``verbs.h``). Unknown codes are reported by number.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LineRef:
    """Where a record came from: file and 1-based line number."""

    source: str
    line: int


@dataclass(frozen=True, slots=True)
class NcclOrigin:
    """The ``host:pid:tid [dev]`` prefix NCCL writes before its level."""

    host: str
    pid: int
    tid: int
    device: int

    @property
    def process(self) -> str:
        """``host:pid``: one process, the unit NCCL settings and transports belong to."""
        return f"{self.host}:{self.pid}"


@dataclass(frozen=True, slots=True)
class NcclVersionRecord:
    """``NCCL version 2.19.3+cuda12.3``."""

    at: LineRef
    origin: NcclOrigin | None
    nccl: str
    cuda: str


@dataclass(frozen=True, slots=True)
class BootstrapRecord:
    """``Bootstrap : Using bond0:172.36.134.184<0>`` (``Bootstrap:`` from 2.25)."""

    at: LineRef
    origin: NcclOrigin | None
    interface: str
    address: str


@dataclass(frozen=True, slots=True)
class NetRecord:
    """Network transport selection.

    ``state`` is ``using`` (``NET/IB : Using [0]mlx5_10:1/RoCE ...``), ``no_device``
    (``NET/IB : No device found.``: NCCL falls back to the next transport) or ``selected``
    (``Using network IB``). ``devices`` lists the NICs named on a ``Using`` line.
    """

    at: LineRef
    origin: NcclOrigin | None
    net: str
    state: str
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SettingRecord:
    """A setting NCCL reports: ``NCCL_SOCKET_IFNAME set by environment to bond0``,
    ``cudaDriverVersion 12080``, ``Comm config Blocking set to 1``, the net plugin fallback."""

    at: LineRef
    origin: NcclOrigin | None
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class CommInitRecord:
    """``comm 0x... rank R nranks N cudaDev D ... - Init START|COMPLETE``."""

    at: LineRef
    origin: NcclOrigin | None
    comm: str
    rank: int
    nranks: int
    state: str
    cuda_device: int | None
    bus_id: str | None
    comm_id: str | None


@dataclass(frozen=True, slots=True)
class InitTimingsRecord:
    """``Init timings: rank R nranks N total 2.46 (kernels 0.18, bootstrap 1.60, ...)`` (2.22+).

    ``parts_seconds`` maps each phase NCCL names to its seconds.
    """

    at: LineRef
    origin: NcclOrigin | None
    rank: int
    nranks: int
    total_seconds: float
    parts_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopoCommRecord:
    """``comm 0x... rank R nRanks N nNodes M localRanks L localRank l MNNVL 0``."""

    at: LineRef
    origin: NcclOrigin | None
    comm: str
    rank: int
    nranks: int
    nnodes: int
    local_ranks: int
    local_rank: int
    mnnvl: int


@dataclass(frozen=True, slots=True)
class TopoSystemRecord:
    """``=== System : maxBw 48.0 totalBw 370.8 ===``: the topology search's bandwidths."""

    at: LineRef
    origin: NcclOrigin | None
    max_bw_bytes_per_second: float
    total_bw_bytes_per_second: float


@dataclass(frozen=True, slots=True)
class RingRecord:
    """A ring: ``Channel 00/08 :    0   5   4 ...`` or the older ``Ring 02 : 2 -> 0 -> 1``."""

    at: LineRef
    origin: NcclOrigin | None
    channel: int
    nchannels: int | None
    order: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TreeRecord:
    """One channel of ``Trees [0] 2/-1/-1->1->0``: up to three children, the rank, its parent.

    -1 means none: a parent of -1 is the tree's root.
    """

    at: LineRef
    origin: NcclOrigin | None
    channel: int
    rank: int
    children: tuple[int, ...]
    parent: int


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    """``Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read`` (``[send]``/``[receive]`` for NET).

    ``transport`` is the first path element (``P2P``, ``NET``, ``SHM``, ``COLLNET``, ...);
    ``via`` the whole path as printed (``NET/IB/0/GDRDMA``).
    """

    at: LineRef
    origin: NcclOrigin | None
    channel: int
    src_rank: int
    src_bus: str
    dst_rank: int
    dst_bus: str
    direction: str | None
    via: str
    transport: str


@dataclass(frozen=True, slots=True)
class ChannelCountsRecord:
    """``16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, 2 ...``."""

    at: LineRef
    origin: NcclOrigin | None
    coll: int
    collnet: int | None
    nvls: int | None
    p2p: int
    p2p_per_peer: int


@dataclass(frozen=True, slots=True)
class WarnRecord:
    """A ``NCCL WARN`` line (IB completion errors have their own record as well)."""

    at: LineRef
    origin: NcclOrigin | None
    message: str
    src_file: str | None


@dataclass(frozen=True, slots=True)
class IbCompletionRecord:
    """``NET/IB : Got completion from peer IP<port> with status=12 opcode=0 len=0 vendor err
    129 (Recv)``: a failed InfiniBand/RoCE work completion."""

    at: LineRef
    origin: NcclOrigin | None
    peer: str
    peer_port: int
    status: int
    opcode: int
    length_bytes: int
    vendor_err: int
    direction: str | None
    local_gid: str | None
    remote_gid: str | None


@dataclass(frozen=True, slots=True)
class ReturnTraceRecord:
    """``transport/net.cc:1298 -> 6``: an error returned up NCCL's call stack."""

    at: LineRef
    origin: NcclOrigin | None
    file: str
    src_line: int
    code: int
    progress_thread: bool


@dataclass(frozen=True, slots=True)
class IbAsyncRecord:
    """``NET/IB : mlx5_3:1 Got non-fatal async event: port error(10)``."""

    at: LineRef
    origin: NcclOrigin | None
    device: str | None
    port: int | None
    event: str
    code: int | None


@dataclass(frozen=True, slots=True)
class NcclInfoRecord:
    """Any other NCCL line, kept with its origin (``Setting affinity``, ``Connected all rings``,
    ``NVLS comm ...``, ``P2P Chunksize``, ``threadThresholds``, ...)."""

    at: LineRef
    origin: NcclOrigin | None
    level: str
    message: str


NcclRecord = (
    NcclVersionRecord
    | BootstrapRecord
    | NetRecord
    | SettingRecord
    | CommInitRecord
    | InitTimingsRecord
    | TopoCommRecord
    | TopoSystemRecord
    | RingRecord
    | TreeRecord
    | ConnectionRecord
    | ChannelCountsRecord
    | WarnRecord
    | IbCompletionRecord
    | ReturnTraceRecord
    | IbAsyncRecord
    | NcclInfoRecord
)

# --------------------------------------------------------------------------- code tables

#: ``ncclResult_t`` (nccl.h): name and what it tells an operator.
NCCL_RESULTS: dict[int, tuple[str, str]] = {
    0: ("ncclSuccess", "no error"),
    1: ("ncclUnhandledCudaError", "a CUDA call failed: check the GPU (Xid) and the driver"),
    2: ("ncclSystemError", "a system call failed (socket, memory, IB verbs)"),
    3: ("ncclInternalError", "NCCL internal error, often a peer that went away"),
    4: ("ncclInvalidArgument", "invalid argument passed to NCCL (application bug)"),
    5: ("ncclInvalidUsage", "invalid use of NCCL (application bug or mismatched calls)"),
    6: ("ncclRemoteError", "a remote peer failed or the network between them did"),
    7: ("ncclInProgress", "operation still in progress (non-blocking communicator)"),
}

#: ``enum ibv_wc_status`` (rdma-core verbs.h): name and meaning.
IBV_WC_STATUS: dict[int, tuple[str, str]] = {
    0: ("IBV_WC_SUCCESS", "success"),
    1: ("IBV_WC_LOC_LEN_ERR", "local length error"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error"),
    3: ("IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error (memory registration)"),
    5: (
        "IBV_WC_WR_FLUSH_ERR",
        "work request flushed because the queue pair had already failed (a consequence of an "
        "earlier error, not a cause)",
    ),
    6: ("IBV_WC_MW_BIND_ERR", "memory window bind error"),
    7: ("IBV_WC_BAD_RESP_ERR", "bad response from the remote side"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "local access error"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error"),
    11: ("IBV_WC_REM_OP_ERR", "remote operation error"),
    12: (
        "IBV_WC_RETRY_EXC_ERR",
        "transport retry counter exceeded: the peer did not acknowledge (peer down, link "
        "flapping, congestion or a routing/GID problem)",
    ),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "receiver-not-ready retry counter exceeded"),
    14: ("IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation"),
    15: ("IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"),
    16: ("IBV_WC_REM_ABORT_ERR", "remote aborted"),
    17: ("IBV_WC_INV_EECN_ERR", "invalid EE context number"),
    18: ("IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"),
    19: ("IBV_WC_FATAL_ERR", "fatal error"),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "response timeout"),
    21: ("IBV_WC_GENERAL_ERR", "general error"),
}

#: ``enum ibv_event_type`` (rdma-core verbs.h): the async events NCCL reports.
IBV_EVENTS: dict[int, str] = {
    0: "IBV_EVENT_CQ_ERR",
    1: "IBV_EVENT_QP_FATAL",
    2: "IBV_EVENT_QP_REQ_ERR",
    3: "IBV_EVENT_QP_ACCESS_ERR",
    4: "IBV_EVENT_COMM_EST",
    5: "IBV_EVENT_SQ_DRAINED",
    6: "IBV_EVENT_PATH_MIG",
    7: "IBV_EVENT_PATH_MIG_ERR",
    8: "IBV_EVENT_DEVICE_FATAL",
    9: "IBV_EVENT_PORT_ACTIVE",
    10: "IBV_EVENT_PORT_ERR",
    11: "IBV_EVENT_LID_CHANGE",
    12: "IBV_EVENT_PKEY_CHANGE",
    13: "IBV_EVENT_SM_CHANGE",
    14: "IBV_EVENT_SRQ_ERR",
    15: "IBV_EVENT_SRQ_LIMIT_REACHED",
    16: "IBV_EVENT_QP_LAST_WQE_REACHED",
    17: "IBV_EVENT_CLIENT_REREGISTER",
    18: "IBV_EVENT_GID_CHANGE",
    19: "IBV_EVENT_WQ_FATAL",
}


def nccl_result_name(code: int) -> str:
    """``ncclRemoteError`` for 6; ``ncclResult 42`` for codes NCCL does not define."""
    known = NCCL_RESULTS.get(code)
    return known[0] if known else f"ncclResult {code}"


def ibv_status_name(status: int) -> str:
    """``IBV_WC_RETRY_EXC_ERR`` for 12; ``ibv_wc_status 99`` for unknown codes."""
    known = IBV_WC_STATUS.get(status)
    return known[0] if known else f"ibv_wc_status {status}"
