"""The alert list's bytes assembled from each alert's kept bytes are the framework's own
serialisation of :class:`AlertList`; alerts read from the store are built once per row value,
and a row that changed reads as it is now."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from starlette.responses import JSONResponse

from hpcscope.model.access import JobScope, WeightPaths
from hpcscope.model.alerts import Alert, AlertState, Evidence, Severity, Vector
from hpcscope.service.alerts.access import redact_alert
from hpcscope.service.alerts.contracts import AlertFilters, AlertList
from hpcscope.service.alerts.documents import alert_list_bytes
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store

T0 = datetime(2026, 12, 1, 12)


def _alerts() -> list[Alert]:
    return [
        Alert(
            rule_id="CE-3",
            vector=Vector.CONTAINER_ESCAPE,
            severity=Severity.HIGH,
            title='nsenter into PID 1\'s namespaces — «quoted» "text"',
            first_seen=T0,
            last_seen=T0 + timedelta(seconds=5),
            count=3,
            node="gpu01",
            job_id="41",
            user="alice",
            account="vision",
            gpu=2,
            subject="rank 3",
            step=120,
            evidence=(
                Evidence("read /ckpt/vision/model.safetensors", "falco", "line 4", "/x?y=1"),
                Evidence("second", "tetragon", None, None),
            ),
            container="train",
            pod="ml/train-0",
        ),
        Alert(
            rule_id="SC-2",
            vector=Vector(2),
            severity=Severity.LOW,
            title="plain",
            first_seen=T0,
            last_seen=T0,
            state=AlertState.ACKNOWLEDGED,
            state_by="admin",
            state_at=T0 + timedelta(minutes=1),
        ),
    ]


def _framework(alerts: list[Alert], filters: AlertFilters) -> bytes:
    return bytes(JSONResponse(AlertList.of(alerts, filters).model_dump(mode="json")).body)


def test_the_assembled_list_is_the_frameworks_bytes() -> None:
    alerts = _alerts()
    redacted = [redact_alert(alert, WeightPaths()) for alert in alerts]
    assert redacted[0].title != alerts[0].title or redacted[0].evidence != alerts[0].evidence
    for filters in (
        AlertFilters(state=None, min_severity=None, vector=None, job_id=None),
        AlertFilters(state="open", min_severity="HIGH", vector="container-escape", job_id="41"),
    ):
        for chosen in ([], alerts, redacted, [alerts[1], alerts[0], alerts[1]]):
            assert alert_list_bytes(chosen, filters) == _framework(chosen, filters)


def test_stored_alerts_are_built_once_per_row_and_read_as_they_are_now(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        alert_store.upsert_alerts(store, _alerts()).result()
        everyone = JobScope(all_jobs=True)
        first = alert_store.alerts(store, everyone)
        again = alert_store.alerts(store, everyone)
        assert [a.key for a in first] == [a.key for a in _alerts()]
        assert all(a is b for a, b in zip(first, again, strict=True))  # built once
        key = first[0].key
        alert_store.set_alert_state(store, key, AlertState.RESOLVED, by="bob", at=T0).result()
        changed = {a.key: a for a in alert_store.alerts(store, everyone)}
        assert changed[key].state is AlertState.RESOLVED and changed[key].state_by == "bob"
        assert changed[first[1].key] is first[1]  # the row that did not change
        # what a fresh build of each row gives
        rows = store.query("SELECT * FROM alerts WHERE dedup_key = ?", [key]).to_pylist()
        assert alert_store._alert(rows[0]).state is AlertState.RESOLVED
