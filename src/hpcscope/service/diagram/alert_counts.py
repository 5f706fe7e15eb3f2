"""Threats mode's counts: open security alerts per threat vector and node, per viewer.

Counts only, never an alert's text: a researcher counts the alerts of their own jobs, admins
and the security team count all, an anonymous visitor none. Part of the diagram's live state
(:mod:`hpcscope.service.diagram.live`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Severity
from hpcscope.service.alerts.access import owners_read
from hpcscope.service.core import Service
from hpcscope.service.diagram.viewer import Viewer
from hpcscope.service.snapshots import Snapshots
from hpcscope.store import alert_index
from hpcscope.store import diagram as queries


@dataclass(frozen=True, slots=True)
class AlertSummary:
    """Open security alerts per threat vector and node, when detections exist.

    ``worst_by_vector``/``worst_by_node``: the severity name (``HIGH``...) of the most severe
    open alert of each vector and node, for Threats mode's colours.
    """

    configured: bool
    shown: bool
    by_vector: Mapping[str, int] = field(default_factory=dict)
    by_node: Mapping[str, int] = field(default_factory=dict)
    worst_by_vector: Mapping[str, str] = field(default_factory=dict)
    worst_by_node: Mapping[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_vector.values())

    def fingerprint(self) -> Hashable:
        """Everything a view of these counts shows, hashable: a key for what is drawn from them
        (an alert's repeated events change its row, never the counts)."""
        counts = (self.by_vector, self.by_node, self.worst_by_vector, self.worst_by_node)
        return (self.configured, self.shown, *(tuple(sorted(c.items())) for c in counts))


def detections_configured(service: Service) -> bool:
    """Whether any source raises alerts: the gradient-integrity spool, Falco (its
    ``http_output`` endpoint or a file) or Tetragon's export."""
    settings = service.settings
    return any(
        source is not None
        for source in (
            settings.integrity.spool_dir,
            settings.falco.ingest_token,
            settings.falco.events_path,
            settings.tetragon.events_path,
        )
    )


def alert_summary(
    service: Service, viewer: Viewer, *, shared: Snapshots | None = None
) -> AlertSummary:
    """Open alerts per vector and node; counts only, never to anonymous visitors, and of the
    alerts the viewer may read (:meth:`~hpcscope.model.access.Principal.alert_scope`: a
    researcher counts the alerts of their own jobs, never one about a process outside them;
    admins and the security team count all). With ``shared`` (the service's snapshots) the
    counts are read once per alert write (:attr:`~hpcscope.service.core.Service.alert_changes`:
    the security engine writes between the collector's cycles, and a state change counts
    too; with the store's alert index, once per change of the open counts), for every viewer,
    and summed once per alert scope (every poll of the live diagram reads them)."""
    scope = viewer.principal.alert_scope() if viewer.principal is not None else None
    if shared is None:
        return _summary(service, viewer.anonymous, scope, queries.open_alert_counts(service.store))

    # the counts change with a new, resolved or reopened alert, not with an alert's repeat
    # firing (most alert writes): with the store's alert index, kept across those. Once a
    # collector publishes its cycles, with the jobs' owners as it read them after its last
    # cycle (read_owners): reading them again is a query (29 ms at 128 nodes), and every
    # write between cycles (many a second) would make one, on the event loop or in a worker
    # thread that every poll then waits for; a job's first alert since counts as nobody's job
    # (only a principal who sees every alert counts it) until the cycle's end
    as_read = owners_read(service.store, published=shared.published) is not None
    indexed = alert_index.open_counts_version(service.store, as_read=as_read)
    version = service.alert_changes if indexed is None else indexed

    # counted from the index in memory (well under a millisecond): on the event loop when a
    # read finds a new version, instead of every poll of every viewer missing it at once and
    # going to a worker thread (1,500 misses in 24 s at 128 nodes, ~4 count changes a second)
    inline = indexed is not None and (as_read or alert_index.in_memory(service.store))

    def summed() -> AlertSummary:
        rows = shared.get(
            "diagram.alert_counts",
            lambda: queries.open_alert_counts(service.store, as_read=as_read),
            version=version,
            inline=inline,
        )
        return _summary(service, viewer.anonymous, scope, rows)

    key = ("diagram.alert_summary", viewer.anonymous, scope)
    summary: AlertSummary = shared.get(key, summed, version=version, inline=inline)
    return summary


def _summary(
    service: Service,
    anonymous: bool,
    scope: JobScope | None,
    rows: Sequence[queries.OpenAlertCount] | None,
) -> AlertSummary:
    if rows is None or not detections_configured(service):
        return AlertSummary(configured=False, shown=not anonymous)
    if anonymous:
        return AlertSummary(configured=True, shown=False)
    by_vector: dict[str, int] = {}
    by_node: dict[str, int] = {}
    worst_vector: dict[str, str] = {}
    worst_node: dict[str, str] = {}

    def worse(seen: dict[str, str], key: str, severity: str) -> None:
        if key not in seen or Severity.parse(severity) > Severity.parse(seen[key]):
            seen[key] = severity

    for row in rows:
        if scope is None or not (
            scope.all_jobs
            or (
                (row.get("user") is not None or row.get("account") is not None)
                and scope.admits(user=row.get("user"), account=row.get("account"))
            )
        ):
            continue
        count, vector, severity = int(row["open"]), str(row["vector"]), str(row["severity"])
        by_vector[vector] = by_vector.get(vector, 0) + count
        worse(worst_vector, vector, severity)
        if row["node"] is not None:
            node = str(row["node"])
            by_node[node] = by_node.get(node, 0) + count
            worse(worst_node, node, severity)
    return AlertSummary(
        configured=True,
        shown=True,
        by_vector=by_vector,
        by_node=by_node,
        worst_by_vector=worst_vector,
        worst_by_node=worst_node,
    )


def read_owners(service: Service) -> None:
    """Read the owners of the jobs with alerts again, if a write since may have changed them
    (a collector's after-cycle hook, before the cycle is published): the counts read after the
    cycle take them as read (:func:`alert_summary`), never querying on the event loop."""
    index = alert_index.index_of(service.store)
    if index is not None:
        alert_index.owners(service.store, index)
