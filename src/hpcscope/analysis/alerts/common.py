"""What the event rules share: job owners, the alert builder, merging, path and CIDR helpers.

Attribution (``security.md`` §0): the node is the event's (Falco ``hostname``, Tetragon
``node_name``); the job the event's cgroup gave (Falco ``thread.cgroups``, Tetragon's
``exec_id`` cache); user and account the store's ``jobs`` row of that job (the event's own
user name or uid only when no job is known). Syscall events name a process, never a GPU: the
alert's ``gpu`` is null and its evidence says so.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from hpcscope.model.alerts import Alert, Evidence, RuleSpec, Severity
from hpcscope.model.security_events import FalcoRow, TetragonRow

#: Evidence items kept per merged alert (the store keeps the newest firing's).

GPU_UNKNOWN = "GPU not known: a syscall event names a process, not a GPU"


@dataclass(frozen=True, slots=True)
class JobOwner:
    """Who a job belongs to, from the store's ``jobs`` (Slurm is the authority)."""

    user: str | None
    account: str | None


def basename(path: str | None) -> str:
    """The last component of a binary path (``/usr/bin/curl`` -> ``curl``); ``""`` for None."""
    if not path:
        return ""
    return path.rstrip("/").rsplit("/", 1)[-1]


def under(path: str | None, prefixes: Iterable[str]) -> bool:
    """Whether ``path`` starts with one of ``prefixes``."""
    return bool(path) and any(path.startswith(p) for p in prefixes if p)  # type: ignore[union-attr]


def contains_any(text: str | None, parts: Iterable[str]) -> bool:
    """Whether ``text`` contains one of ``parts``."""
    return bool(text) and any(p in text for p in parts if p)  # type: ignore[operator]


def networks(cidrs: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parsed CIDRs.

    Raises:
        ValueError: a CIDR that does not parse (the rule file names it).
    """
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def in_networks(
    address: str | None, nets: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> bool | None:
    """Whether ``address`` is inside one of ``nets``; None when it is not an address."""
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    return any(ip.version == net.version and ip in net for net in nets)


def event_time(row: FalcoRow | TetragonRow) -> datetime:
    """A Tetragon event's time (the rules skip events without one before they read it).

    Raises:
        ValueError: the event has no time.
    """
    ts = row["ts"]
    if ts is None:
        raise ValueError(f"{row['source_name']}:{row['source_line']}: an event without a time")
    return ts


def pod_of(row: FalcoRow | TetragonRow) -> str | None:
    """The event's pod, ``namespace/name`` (the name alone without a namespace), or None."""
    pod, namespace = row["pod_name"], row["pod_namespace"]
    if not pod:
        return None
    return f"{namespace}/{pod}" if namespace else pod


def container_of(row: FalcoRow | TetragonRow) -> str | None:
    """The event's container, its name else its id, or None (Falco names the bare host
    ``host``: not a container)."""
    container = row["container_name"] or row["container_id"]
    return container if container and container != "host" else None


def where_run(row: FalcoRow | TetragonRow) -> str:
    """``" in pod ns/name"`` or ``" in container name"`` when the event names one (the node is
    the alert's own attribution), else ``""``."""
    pod = pod_of(row)
    if pod:
        return f" in pod {pod}"
    container = container_of(row)
    return f" in container {container}" if container else ""


def event_alert(
    spec: RuleSpec,
    row: FalcoRow | TetragonRow,
    *,
    node: str | None,
    owners: Mapping[str, JobOwner],
    subject: str,
    summary: str,
    event_user: str | None,
    severity: Severity | None = None,
) -> Alert:
    """One firing of an event rule on one event row, attributed and with its evidence.

    Args:
        spec: the rule.
        row: the event (Falco or Tetragon row: ``ts``, ``job_id``, ``source_name``,
            ``source_line``).
        node: the event's node.
        owners: job id -> owner, from the store's jobs.
        subject: what the alert is about inside the job (dedup: one alert per rule, job,
            node and subject).
        summary: one line of evidence.
        event_user: the event's own user (name or ``uid N``), used when no job is known.
        severity: overrides the rule's (SC-2 CRITICAL, SC-3 on miner ports).
    """
    ts = event_time(row)
    job_id = row.get("job_id")
    owner = owners.get(job_id) if job_id is not None else None
    evidence = Evidence(
        summary=f"{summary}{where_run(row)}; {GPU_UNKNOWN}",
        source=str(row["source_name"]),
        position=f"line {row['source_line']}",
    )
    return Alert(
        rule_id=spec.rule_id,
        vector=spec.vector,
        severity=severity or spec.severity,
        title=spec.title,
        first_seen=ts,
        last_seen=ts,
        node=node,
        job_id=job_id,
        user=owner.user if owner is not None and owner.user else event_user,
        account=owner.account if owner is not None else None,
        gpu=None,
        subject=subject,
        evidence=(evidence,),
        container=container_of(row),
        pod=pod_of(row),
    )
