"""One ``NCCL_DEBUG=INFO`` line -> one typed record (:mod:`hpcscope.model.nccl`).

The patterns are those of ``training-steps.md`` §8, tested over real logs of NCCL 2.7 to 2.27
(``tests/fixtures/nccl``): they search, they do not anchor, because launchers prepend text.
A line that names NCCL but says something these patterns do not know becomes an
:class:`~hpcscope.model.nccl.NcclInfoRecord`; a line that does not name NCCL returns None.
"""

from __future__ import annotations

import re

from hpcscope.model.nccl import (
    BootstrapRecord,
    ChannelCountsRecord,
    CommInitRecord,
    ConnectionRecord,
    IbAsyncRecord,
    IbCompletionRecord,
    InitTimingsRecord,
    LineRef,
    NcclInfoRecord,
    NcclOrigin,
    NcclRecord,
    NcclVersionRecord,
    NetRecord,
    ReturnTraceRecord,
    RingRecord,
    SettingRecord,
    TopoCommRecord,
    TopoSystemRecord,
    TreeRecord,
    WarnRecord,
)

_GB = 1e9

NCCL_LINE = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<src>[\w./-]+\.cc?):(?P<srcline>\d+) )?NCCL (?P<level>INFO|WARN|TRACE|ABORT)\b ?"
    r"(?P<msg>.*)$"
)
NCCL_BARE = re.compile(
    r"^(?:.*?\s)?(?:(?P<src>[\w./-]+\.cc?):(?P<srcline>\d+) )?NCCL (?P<level>INFO|WARN)\b ?"
    r"(?P<msg>.*)$"
)
#: A decimal as the logs print it ("12", "3.5", ".5"), never "1.2.3": float() takes every match.
NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
VERSION = re.compile(r"NCCL version (?P<nccl>\d+\.\d+\.\d+)\+cuda(?P<cuda>[\d.]+)")
BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?P<iface>[^:\s]+):(?P<addr>[^<\s]+)<(?P<port>\d+)>")
NET_TRANSPORT = re.compile(r"NET/(?P<net>IB|Socket|OFI|\w+) : (?P<what>Using|No device)")
NET_SELECTED = re.compile(r"^Using network (?P<net>\S+)")
NET_DEVICE = re.compile(r"\[\d+\](\S+)")
INIT_STATE = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) .*- Init "
    r"(?P<state>START|COMPLETE)"
)
INIT_CUDADEV = re.compile(r"cudaDev (?P<dev>\d+)")
INIT_BUSID = re.compile(r"busId (?P<bus>[0-9a-fA-F]+)")
INIT_COMMID = re.compile(r"commId (?P<id>0x[0-9a-f]+)")
INIT_TIMINGS = re.compile(
    r"Init timings: rank (?P<rank>\d+) nranks (?P<nranks>\d+) total "
    rf"(?P<total_s>{NUMBER})"
    r"(?: \((?P<parts>[^)]*)\))?"
)
TIMING_PART = re.compile(rf"(?P<name>[A-Za-z_]+) (?P<seconds>{NUMBER})")
TOPO_COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes "
    r"(?P<nnodes>\d+) localRanks (?P<localranks>\d+) localRank (?P<localrank>\d+) MNNVL "
    r"(?P<mnnvl>\d+)"
)
TOPO_SYSTEM = re.compile(
    rf"=== System : maxBw (?P<maxbw>{NUMBER}) totalBw (?P<totalbw>{NUMBER}) ==="
)
RING_CHANNEL = re.compile(r"Channel (?P<ch>\d+)/(?P<nch>\d+) :\s+(?P<order>[\d\s]+?)\s*$")
RING_LEGACY = re.compile(r"Ring (?P<ch>\d+) : (?P<order>\d+(?: -> \d+)+)")
TREE = re.compile(
    r"\[(?P<ch>\d+)\] (?P<c0>-?\d+)/(?P<c1>-?\d+)/(?P<c2>-?\d+)->(?P<rank>\d+)->(?P<parent>-?\d+)"
)
TREE_LEGACY = re.compile(
    r"Tree (?P<ch>\d+) : (?P<parent>-?\d+) -> (?P<rank>\d+) -> "
    r"(?P<c0>-?\d+)/(?P<c1>-?\d+)/(?P<c2>-?\d+)"
)
CONNECTION = re.compile(
    r"Channel (?P<ch>\d+)(?:/\d+)? : (?P<src>\d+)\[(?P<srcbus>\w+)\] -> "
    r"(?P<dst>\d+)\[(?P<dstbus>\w+)\] (?:\[(?P<dir>send|receive)\] )?via (?P<via>.+?)\s*$"
)
CHANNELS = re.compile(
    r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
    r"(?:(?P<nvls>\d+) nvls channels, )?(?P<p2p>\d+) p2p channels, "
    r"(?P<p2p_peer>\d+) p2p channels per peer"
)
IB_COMPLETION = re.compile(
    r"Got completion from peer (?P<peer>\S+?)<(?P<port>\d+)> with status=(?P<status>\d+) "
    r"opcode=(?P<opcode>\d+) len=(?P<len>\d+) vendor err (?P<vendor>\d+)"
    r"(?: \((?P<dir>\w+)\))?(?: localGid (?P<lgid>\S+))?(?: remoteGids ?(?P<rgid>\S+))?"
)
RET_TRACE = re.compile(
    r"(?P<file>[\w./-]+\.cc):(?P<line>\d+) -> (?P<code>\d+)(?P<progress> \[Progress Thread\])?"
)
IB_ASYNC = re.compile(
    r"NET/IB : (?:(?P<dev>\S+):(?P<port>\d+) )?Got non-fatal async event: "
    r"(?P<event>[^(\n]+?)(?:\((?P<code>\d+)\))?\s*$"
)
ENV_SETTING = re.compile(r"^(?P<key>NCCL_\w+) set by environment to (?P<value>.*)$")
DRIVER = re.compile(r"^cudaDriverVersion (?P<value>\d+)")
COMM_CONFIG = re.compile(r"^Comm config (?P<key>\w+) set to (?P<value>\S+)")
PLUGIN = re.compile(r"^NET/Plugin ?: (?P<value>.*)$")


def parse_nccl_line(text: str, at: LineRef) -> tuple[NcclRecord, ...] | None:
    """Parse one line (launcher prefix already removed) into records, or None if not NCCL's.

    A line is one record, except a ``Trees`` line: one :class:`TreeRecord` per channel.

    Lines without the ``host:pid:tid [dev]`` origin are still read when they carry a message
    NCCL writes (a bare ``NCCL version`` banner, ``file.cc:N NCCL WARN ...``, an IB completion
    error quoted without its prefix); their record's ``origin`` is None.
    """
    match = NCCL_LINE.search(text)
    origin: NcclOrigin | None = None
    if match is not None:
        origin = NcclOrigin(
            host=match["host"],
            pid=int(match["pid"]),
            tid=int(match["tid"]),
            device=int(match["dev"]),
        )
    else:
        match = NCCL_BARE.search(text)
    if match is None:
        free = _free_standing(text, at)
        return None if free is None else (free,)
    level = match["level"]
    message = match["msg"]
    if level == "WARN":
        return (_warn(message, match["src"], at, origin),)
    if message.startswith("Trees"):
        trees = tuple(_tree(t, at, origin) for t in TREE.finditer(message))
        if trees:
            return trees
    record = _info(message, at, origin)
    return (record if record is not None else NcclInfoRecord(at, origin, level, message),)


def _free_standing(text: str, at: LineRef) -> NcclRecord | None:
    """Messages that also appear without NCCL's prefix: the version banner, IB errors."""
    version = VERSION.search(text)
    if version is not None:
        return NcclVersionRecord(at, None, version["nccl"], version["cuda"])
    completion = IB_COMPLETION.search(text)
    if completion is not None:
        return _ib_completion(completion, at, None)
    return None


def _warn(message: str, src: str | None, at: LineRef, origin: NcclOrigin | None) -> NcclRecord:
    completion = IB_COMPLETION.search(message)
    if completion is not None:
        return _ib_completion(completion, at, origin)
    event = IB_ASYNC.search(message)
    if event is not None:
        return IbAsyncRecord(
            at,
            origin,
            device=event["dev"],
            port=int(event["port"]) if event["port"] else None,
            event=event["event"].strip(),
            code=int(event["code"]) if event["code"] else None,
        )
    return WarnRecord(at, origin, message=message.strip(), src_file=src)


def _ib_completion(
    match: re.Match[str], at: LineRef, origin: NcclOrigin | None
) -> IbCompletionRecord:
    return IbCompletionRecord(
        at,
        origin,
        peer=match["peer"],
        peer_port=int(match["port"]),
        status=int(match["status"]),
        opcode=int(match["opcode"]),
        length_bytes=int(match["len"]),
        vendor_err=int(match["vendor"]),
        direction=match["dir"],
        local_gid=match["lgid"],
        remote_gid=match["rgid"],
    )


def _info(message: str, at: LineRef, origin: NcclOrigin | None) -> NcclRecord | None:
    """The INFO messages hpcscope reads, most frequent first."""
    if m := CONNECTION.search(message):
        via = m["via"]
        return ConnectionRecord(
            at,
            origin,
            channel=int(m["ch"]),
            src_rank=int(m["src"]),
            src_bus=m["srcbus"],
            dst_rank=int(m["dst"]),
            dst_bus=m["dstbus"],
            direction=m["dir"],
            via=via,
            transport=via.split("/", 1)[0].split(" ", 1)[0],
        )
    if m := RING_CHANNEL.search(message):
        order = tuple(int(r) for r in m["order"].split())
        return RingRecord(at, origin, int(m["ch"]), int(m["nch"]), order)
    if m := RING_LEGACY.search(message):
        order = tuple(int(r) for r in m["order"].split(" -> "))
        return RingRecord(at, origin, int(m["ch"]), None, order)
    if m := TREE_LEGACY.search(message):
        return _tree(m, at, origin)
    if m := INIT_STATE.search(message):
        dev = INIT_CUDADEV.search(message)
        bus = INIT_BUSID.search(message)
        comm_id = INIT_COMMID.search(message)
        return CommInitRecord(
            at,
            origin,
            comm=m["comm"],
            rank=int(m["rank"]),
            nranks=int(m["nranks"]),
            state=m["state"],
            cuda_device=int(dev["dev"]) if dev else None,
            bus_id=bus["bus"] if bus else None,
            comm_id=comm_id["id"] if comm_id else None,
        )
    if m := TOPO_COMM.search(message):
        return TopoCommRecord(
            at,
            origin,
            comm=m["comm"],
            rank=int(m["rank"]),
            nranks=int(m["nranks"]),
            nnodes=int(m["nnodes"]),
            local_ranks=int(m["localranks"]),
            local_rank=int(m["localrank"]),
            mnnvl=int(m["mnnvl"]),
        )
    if m := CHANNELS.search(message):
        return ChannelCountsRecord(
            at,
            origin,
            coll=int(m["coll"]),
            collnet=int(m["collnet"]) if m["collnet"] else None,
            nvls=int(m["nvls"]) if m["nvls"] else None,
            p2p=int(m["p2p"]),
            p2p_per_peer=int(m["p2p_peer"]),
        )
    if m := RET_TRACE.search(message):
        return ReturnTraceRecord(
            at,
            origin,
            file=m["file"],
            src_line=int(m["line"]),
            code=int(m["code"]),
            progress_thread=m["progress"] is not None,
        )
    if m := VERSION.search(message):
        return NcclVersionRecord(at, origin, m["nccl"], m["cuda"])
    if m := BOOTSTRAP.search(message):
        return BootstrapRecord(at, origin, interface=m["iface"], address=m["addr"])
    if m := NET_TRANSPORT.search(message):
        state = "using" if m["what"] == "Using" else "no_device"
        devices = tuple(NET_DEVICE.findall(message.split(";", 1)[0])) if state == "using" else ()
        return NetRecord(at, origin, net=m["net"], state=state, devices=devices)
    if m := NET_SELECTED.search(message):
        return NetRecord(at, origin, net=m["net"], state="selected")
    if m := INIT_TIMINGS.search(message):
        parts = {p["name"]: float(p["seconds"]) for p in TIMING_PART.finditer(m["parts"] or "")}
        return InitTimingsRecord(
            at, origin, int(m["rank"]), int(m["nranks"]), float(m["total_s"]), parts
        )
    if m := TOPO_SYSTEM.search(message):
        return TopoSystemRecord(at, origin, float(m["maxbw"]) * _GB, float(m["totalbw"]) * _GB)
    if m := ENV_SETTING.search(message):
        return SettingRecord(at, origin, m["key"], m["value"].strip())
    if m := DRIVER.search(message):
        return SettingRecord(at, origin, "cudaDriverVersion", m["value"])
    if m := COMM_CONFIG.search(message):
        return SettingRecord(at, origin, f"CommConfig.{m['key']}", m["value"])
    if m := PLUGIN.search(message):
        return SettingRecord(at, origin, "NET/Plugin", m["value"].strip())
    return None


def _tree(m: re.Match[str], at: LineRef, origin: NcclOrigin | None) -> TreeRecord:
    children = tuple(int(m[c]) for c in ("c0", "c1", "c2") if int(m[c]) >= 0)
    return TreeRecord(at, origin, int(m["ch"]), int(m["rank"]), children, int(m["parent"]))
