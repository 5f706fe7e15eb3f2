"""slurmrestd responses (and ``squeue --json`` / ``sinfo --json``, which print the same shape).

Generations read (``telemetry.md`` §5): ``openapi/v0.0.37`` and ``v0.0.38`` (Slurm 21.08-22.05:
flat numbers, ``job_state`` a string, ``exit_code`` a raw wait status), ``data_parser/v0.0.39``
to ``v0.0.41`` (23.02-24.05: numbers as ``{set, infinite, number}``, ``job_state`` a list,
``exit_code`` an object). Fields are looked up by name; the generation in ``meta`` is recorded,
never used to guess positions.

Endpoints: ``GET /slurm/v0.0.4x/jobs`` -> :func:`parse_slurmrestd_jobs`; ``/nodes`` ->
:func:`parse_slurmrestd_nodes`; ``/partitions`` -> :func:`parse_slurmrestd_partitions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from hpcscope.ingest.slurm.common import (
    FINISHED_STATES,
    JobRows,
    SchedulerFormatError,
    SchedulerSnapshot,
    canonical_job_id,
    epoch_or_none,
    exit_code_from,
    exit_code_from_wait_status,
    load_json_document,
    normalize_state,
    slurm_int,
    string_or_none,
    time_limit_seconds,
)
from hpcscope.ingest.slurm.fields import DOCUMENT_KEYS, NODE_KEYS, SLURMCTLD_JOB_KEYS
from hpcscope.ingest.slurm.gres import (
    GresEntry,
    gpus_from_tres_string,
    parse_gres,
)
from hpcscope.ingest.slurm.inventory import InventorySnapshot, SlurmNode, SlurmPartition
from hpcscope.model.errors import SourceError
from hpcscope.model.hostlist import HostlistError, expand_hostlist

GresIndexResolver = Callable[[str, GresEntry, int], tuple[int, int | None] | None]
"""``(node, gres entry, slurm gres index) -> (dcgm gpu, gpu instance id)``, or None if unknown.

Slurm numbers a node's GPUs by their position in its GRES list; dcgm-exporter by NVML index;
for MIG, Slurm's indices count MIG devices while dcgm names them ``<gpu>.<GPU_I_ID>``. A site
whose numbering differs passes a resolver built from its device map."""


def physical_gpu_indices(node: str, entry: GresEntry, index: int) -> tuple[int, int | None] | None:
    """The default resolver: a GPU's Slurm index is its NVML index (``AutoDetect=nvml``).

    MIG entries return None: their indices count MIG devices, and only a device map (nvidia-smi
    or the node's ``gpu-map`` file) says which GPU and GPU instance each one is. Guessing would
    attribute one job's samples to another.
    """
    if entry.is_mig:
        return None
    return index, None


class _Warnings:
    """Collects warnings of one document, one per unknown field."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[SourceError] = []
        self._unknown: dict[str, str] = {}

    def add(self, message: str, *, field: str | None = None) -> None:
        self.items.append(SchedulerFormatError(message, source=self.source, field=field))

    def check_keys(self, entry: Mapping[str, Any], known: frozenset[str], where: str) -> None:
        for key in entry:
            if key not in known and key not in self._unknown:
                self._unknown[key] = where

    def finish(self) -> list[SourceError]:
        for key, where in self._unknown.items():
            self.add(
                f"unknown field {key!r} (a newer Slurm?): ignored, the rest was read",
                field=f"{where}.{key}",
            )
        self._unknown.clear()
        return self.items


def _document_list(doc: Mapping[str, Any], key: str, warn: _Warnings) -> list[Any]:
    """The document's main array, with Slurm's own ``errors``/``warnings`` reported."""
    for message_key in ("errors", "warnings"):
        messages = doc.get(message_key)
        if isinstance(messages, list):
            for message in messages:
                text = (
                    message.get("description") or message.get("error") or str(message)
                    if isinstance(message, Mapping)
                    else str(message)
                )
                warn.add(f"slurm reported {message_key[:-1]}: {text}", field=message_key)
    warn.check_keys(doc, DOCUMENT_KEYS, "$")
    items = doc.get(key)
    if items is None:
        raise SchedulerFormatError(
            f"no {key!r} array in the response (keys: {sorted(doc)[:8]})",
            source=warn.source,
            field=key,
        )
    if not isinstance(items, list):
        raise SchedulerFormatError(
            f"{key!r} is {type(items).__name__}, expected an array", source=warn.source, field=key
        )
    return items


def _cluster_from_meta(meta: object) -> str | None:
    if isinstance(meta, Mapping):
        for key in ("slurm", "Slurm"):
            block = meta.get(key)
            if isinstance(block, Mapping):
                return string_or_none(block.get("cluster"))
    return None


# --------------------------------------------------------------------------- jobs


def parse_slurmrestd_jobs(
    payload: bytes | str | Mapping[str, Any],
    *,
    source: str,
    gres_index: GresIndexResolver = physical_gpu_indices,
) -> SchedulerSnapshot:
    """Read a slurmrestd ``/slurm/v0.0.37+/jobs`` response (or ``squeue --json`` output).

    Args:
        payload: the response body, or the decoded document.
        source: where it came from (URL or command), named in every error and warning.
        gres_index: maps Slurm GRES indices to dcgm GPU numbers (see
            :data:`GresIndexResolver`).

    Returns:
        Jobs, the GPUs each started job holds per node (from ``gres_detail``), raw-id aliases
        of array tasks and het components, and warnings (unknown fields, skipped entries).

    Raises:
        SchedulerFormatError: the document is not JSON (truncated: line and column given), or
            has no ``jobs`` array. Nothing is returned then, so nothing stored is replaced.
    """
    doc = load_json_document(payload, source=source)
    warn = _Warnings(source)
    entries = _document_list(doc, "jobs", warn)
    default_cluster = _cluster_from_meta(doc.get("meta"))
    rows = JobRows()
    for index, entry in enumerate(entries):
        where = f"jobs[{index}]"
        if not isinstance(entry, Mapping):
            warn.add(f"entry is {type(entry).__name__}, not an object: skipped", field=where)
            continue
        warn.check_keys(entry, SLURMCTLD_JOB_KEYS, where)
        try:
            _add_slurmctld_job(rows, entry, default_cluster, gres_index, warn, where)
        except (ValueError, TypeError, KeyError, HostlistError) as exc:
            warn.add(f"entry skipped: {exc}", field=where)
    return rows.snapshot(warn.finish())


def _add_slurmctld_job(
    rows: JobRows,
    job: Mapping[str, Any],
    default_cluster: str | None,
    gres_index: GresIndexResolver,
    warn: _Warnings,
    where: str,
) -> None:
    raw_id = slurm_int(job.get("job_id"))
    if raw_id is None or raw_id <= 0:
        raise ValueError(f"no job_id ({job.get('job_id')!r})")
    array_job_id = slurm_int(job.get("array_job_id")) or None
    array_task_id = slurm_int(job.get("array_task_id")) if array_job_id else None
    het_job_id = slurm_int(job.get("het_job_id")) or None
    het_offset = slurm_int(job.get("het_job_offset")) if het_job_id else None
    job_id = canonical_job_id(
        raw_id,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        array_task_string=string_or_none(job.get("array_task_string")),
        het_job_id=het_job_id,
        het_job_offset=het_offset,
    )
    state, known = normalize_state(job.get("job_state"))
    if not known:
        warn.add(f"unknown job state {state!r}: kept as written", field=f"{where}.job_state")
    nodes = string_or_none(job.get("nodes"))
    # a job cancelled while pending has start_time = end_time = cancel time and no nodes
    started = state not in (None, "PENDING") and nodes is not None
    finished = state in FINISHED_STATES
    start = epoch_or_none(job.get("start_time")) if started else None
    end = epoch_or_none(job.get("end_time")) if finished else None
    exit_code = _exit_code(job.get("exit_code")) if finished else None
    gpus = gpus_from_tres_string(str(job.get("tres_alloc_str") or ""))
    if gpus is None:
        gpus = gpus_from_tres_string(str(job.get("tres_req_str") or ""))
    cluster = string_or_none(job.get("cluster")) or default_cluster
    allocations = _gpu_allocations(job, job_id, start, end, gres_index, warn, where)

    rows.add_job(
        job_id=job_id,
        cluster=cluster,
        name=string_or_none(job.get("name")),
        user=string_or_none(job.get("user_name")),
        account=string_or_none(job.get("account")),
        partition=string_or_none(job.get("partition")),
        qos=string_or_none(job.get("qos")),
        state=state,
        exit_code=exit_code,
        submit_time=epoch_or_none(job.get("submit_time")),
        eligible_time=epoch_or_none(job.get("eligible_time")),
        start_time=start,
        end_time=end,
        time_limit_seconds=time_limit_seconds(job.get("time_limit")),
        gpus=gpus,
        nodes=nodes,
        source=warn.source,
    )
    rows.add_alias(raw_job_id=str(raw_id), job_id=job_id, cluster=cluster)
    for allocation in allocations:
        rows.add_allocation(**allocation)


def _exit_code(value: object) -> int | None:
    """``exit_code`` in either shape: a raw wait status (v0.0.37/38) or an object (v0.0.39+)."""
    if isinstance(value, Mapping):
        return_code = slurm_int(value.get("return_code"))
        signal_block = value.get("signal")
        signal = None
        if isinstance(signal_block, Mapping):
            signal = slurm_int(signal_block.get("id"))
        return exit_code_from(return_code, signal)
    return exit_code_from_wait_status(slurm_int(value))


def _allocated_node_names(job: Mapping[str, Any]) -> list[str]:
    """The job's nodes in Slurm's order (the order of ``gres_detail``)."""
    resources = job.get("job_resources")
    if isinstance(resources, Mapping):
        allocated = resources.get("allocated_nodes")
        if isinstance(allocated, list):  # v0.0.39/40: [{nodename: ...}]
            names = [str(n.get("nodename")) for n in allocated if isinstance(n, Mapping)]
            if names and all(names):
                return names
        nodes = resources.get("nodes")
        if isinstance(nodes, Mapping):  # v0.0.41: {allocation: [{name: ...}]}
            allocation = nodes.get("allocation")
            if isinstance(allocation, list):
                names = [str(n.get("name")) for n in allocation if isinstance(n, Mapping)]
                if names and all(names):
                    return names
        if isinstance(nodes, str) and nodes.strip():
            return expand_hostlist(nodes)
    text = job.get("nodes")
    return expand_hostlist(text) if isinstance(text, str) else []


class _Allocation(TypedDict):
    """One GPU a job holds, as :meth:`JobRows.add_allocation` takes it (epoch seconds)."""

    job_id: str
    node: str
    gpu: int
    gpu_instance_id: int | None
    start_time: int
    end_time: int | None


def _gpu_allocations(
    job: Mapping[str, Any],
    job_id: str,
    start: int | None,
    end: int | None,
    gres_index: GresIndexResolver,
    warn: _Warnings,
    where: str,
) -> list[_Allocation]:
    details = job.get("gres_detail")
    if start is None or not isinstance(details, list) or not details:
        return []
    nodes = _allocated_node_names(job)
    if len(nodes) != len(details):
        warn.add(
            f"gres_detail has {len(details)} entries for {len(nodes)} nodes: "
            "GPU allocations of this job not recorded (cannot tell which node holds which GPU)",
            field=f"{where}.gres_detail",
        )
        return []
    out: list[_Allocation] = []
    for node, detail in zip(nodes, details, strict=True):
        try:
            entries = parse_gres(str(detail))
        except ValueError as exc:
            warn.add(f"{exc}: GPUs on {node} not recorded", field=f"{where}.gres_detail")
            continue
        for entry in entries:
            if entry.name != "gpu" or not entry.indices:
                continue
            for index in entry.indices:
                resolved = gres_index(node, entry, index)
                if resolved is None:
                    warn.add(
                        f"GPU index {index} ({entry.type}) on {node} has no known dcgm GPU "
                        "(MIG needs a device map): not attributed",
                        field=f"{where}.gres_detail",
                    )
                    continue
                gpu, instance = resolved
                out.append(
                    {
                        "job_id": job_id,
                        "node": node,
                        "gpu": gpu,
                        "gpu_instance_id": instance,
                        "start_time": start,
                        "end_time": end,
                    }
                )
    return out


# --------------------------------------------------------------------------- nodes


def _states(value: object) -> tuple[str, ...]:
    """Node state in any shape: ``["IDLE", "DRAIN"]``, ``"idle"`` + ``state_flags``,
    ``"mixed+drain"``, ``"idle*"``."""
    if isinstance(value, list):
        return tuple(str(v).strip().upper() for v in value if str(v).strip())
    if isinstance(value, str) and value.strip():
        text = value.strip().upper()
        suffix_flags = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP"}
        flags: list[str] = []
        while text and text[-1] in "*~#!%$@^-":
            flag = suffix_flags.get(text[-1])
            if flag:
                flags.append(flag)
            text = text[:-1]
        return tuple(part for part in text.split("+") if part) + tuple(flags)
    return ()


def parse_slurmrestd_nodes(
    payload: bytes | str | Mapping[str, Any], *, source: str
) -> InventorySnapshot:
    """Read a slurmrestd ``/nodes`` response or ``sinfo --json`` output.

    Raises:
        SchedulerFormatError: not JSON (with line and column), or no ``nodes`` array.
    """
    doc = load_json_document(payload, source=source)
    warn = _Warnings(source)
    entries = _document_list(doc, "nodes", warn)
    nodes: list[SlurmNode] = []
    for index, entry in enumerate(entries):
        where = f"nodes[{index}]"
        if not isinstance(entry, Mapping):
            warn.add("entry is not an object: skipped", field=where)
            continue
        warn.check_keys(entry, NODE_KEYS, where)
        name = string_or_none(entry.get("name"))
        if name is None:
            warn.add("node without a name: skipped", field=where)
            continue
        states = _states(entry.get("state"))
        flags = entry.get("state_flags")
        if isinstance(flags, list):
            states += tuple(str(f).strip().upper() for f in flags if str(f).strip())
        try:
            gres = tuple(parse_gres(str(entry.get("gres") or "")))
            gres_used = tuple(parse_gres(str(entry.get("gres_used") or "")))
        except ValueError as exc:
            warn.add(f"{exc}: GRES of {name} not read", field=f"{where}.gres")
            gres, gres_used = (), ()
        partitions = entry.get("partitions")
        memory_mib = _int_or_none(entry.get("real_memory"))
        nodes.append(
            SlurmNode(
                name=name,
                states=states,
                partitions=tuple(str(p) for p in partitions)
                if isinstance(partitions, list)
                else (),
                gres=gres,
                gres_used=gres_used,
                cpus=_int_or_none(entry.get("cpus")),
                real_memory_bytes=None if memory_mib is None else memory_mib * 1024 * 1024,
                reason=string_or_none(entry.get("reason")),
            )
        )
    return InventorySnapshot(nodes=tuple(nodes), warnings=tuple(warn.finish()))


def _int_or_none(value: object) -> int | None:
    try:
        return slurm_int(value)
    except ValueError:
        return None


# --------------------------------------------------------------------------- partitions


def parse_slurmrestd_partitions(
    payload: bytes | str | Mapping[str, Any], *, source: str
) -> InventorySnapshot:
    """Read a slurmrestd ``/partitions`` response (v0.0.37 flat or v0.0.40+ nested).

    Raises:
        SchedulerFormatError: not JSON (with line and column), or no ``partitions`` array.
    """
    doc = load_json_document(payload, source=source)
    warn = _Warnings(source)
    entries = _document_list(doc, "partitions", warn)
    partitions: list[SlurmPartition] = []
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        if not isinstance(entry, Mapping):
            warn.add("entry is not an object: skipped", field=where)
            continue
        name = string_or_none(entry.get("name"))
        if name is None:
            warn.add("partition without a name: skipped", field=where)
            continue
        nodes_block = entry.get("nodes")
        if isinstance(nodes_block, Mapping):  # v0.0.39+
            node_list = string_or_none(nodes_block.get("configured"))
            total_nodes = _int_or_none(nodes_block.get("total"))
        else:  # v0.0.37/38: "nodes": "n[1-4]", "nodes_online"/"total_nodes"
            node_list = string_or_none(nodes_block)
            total_nodes = _int_or_none(entry.get("total_nodes"))
        state_block = entry.get("partition")
        state: str | None = None
        if isinstance(state_block, Mapping):
            states = _states(state_block.get("state"))
            state = states[0] if states else None
        elif isinstance(entry.get("state"), str):
            state = str(entry["state"]).upper()
        flags = entry.get("flags")
        is_default = isinstance(flags, list) and "default" in [str(f).lower() for f in flags]
        maximums = entry.get("maximums")
        max_time = (
            maximums.get("time") if isinstance(maximums, Mapping) else entry.get("max_time_limit")
        )
        cpus_block = entry.get("cpus")
        total_cpus = (
            _int_or_none(cpus_block.get("total"))
            if isinstance(cpus_block, Mapping)
            else _int_or_none(entry.get("total_cpus"))
        )
        try:
            max_time_seconds = time_limit_seconds(max_time)
        except ValueError:
            max_time_seconds = None
        partitions.append(
            SlurmPartition(
                name=name,
                nodes=node_list,
                state=state,
                is_default=is_default,
                max_time_seconds=max_time_seconds,
                total_nodes=total_nodes,
                total_cpus=total_cpus,
            )
        )
    return InventorySnapshot(partitions=tuple(partitions), warnings=tuple(warn.finish()))
