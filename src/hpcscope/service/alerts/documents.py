"""The alert list's JSON (``GET /api/alerts``) assembled from each alert's kept bytes.

A list is read again after every alert write (its version: ``Service.alert_changes``), and at
128 nodes the engines write several a minute: each time, validating and serialising every alert
it shows cost 3/4 of its computation (about 20 ms for 300 alerts, with 50 clients waiting on
it). An alert is immutable, so its document's bytes are kept once per alert (its key, and
whether it is redacted: :data:`FRAGMENTS`, the newest version replacing the older, least
recently used out first) and the list's bytes are the filters' and the count's around
them: exactly what the framework writes for :class:`AlertList` (JSON without spaces, fields in
the model's order; ``tests/service/alerts/test_alert_documents.py`` compares the bytes).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from hpcscope.model.alerts import Alert
from hpcscope.model.kept_alerts import KeptPerAlert
from hpcscope.service.alerts.contracts import AlertDocument, AlertFilters

#: Alert documents kept as bytes (about 0.7 KB each), one per alert.
FRAGMENTS = 8192
_FRAGMENTS: KeptPerAlert[bytes] = KeptPerAlert(FRAGMENTS)


def _json(value: object) -> bytes:
    """``value`` as the web framework writes a JSON response."""
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def alert_bytes(alert: Alert) -> bytes:
    """One alert's :class:`AlertDocument` as JSON bytes (kept for its latest version)."""
    return _FRAGMENTS.get(
        (alert.key, type(alert)),
        alert,
        lambda: _json(AlertDocument.of(alert).model_dump(mode="json")),
    )


def alert_list_bytes(alerts: Sequence[Alert], filters: AlertFilters) -> bytes:
    """``AlertList.of(alerts, filters)`` as the framework serialises it."""
    return b"".join(
        (
            b'{"filters":',
            _json(filters.model_dump(mode="json")),
            b',"count":',
            str(len(alerts)).encode(),
            b',"alerts":[',
            b",".join(alert_bytes(alert) for alert in alerts),
            b"]}",
        )
    )
