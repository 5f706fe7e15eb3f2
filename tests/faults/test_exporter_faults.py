"""Exporter faults against a running server: down, slower than the timeout, garbage, HTTP 500,
flapping. Real processes: ``tests/faults/misbehaving_exporter.py`` and ``hpcscope serve``.

Each fault costs failed ``scrapes`` rows with the operator's error, the failing span is a
``collection_gaps`` row with no sample inside (never zeros), the server keeps running, and
collection resumes when the exporter behaves again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hpcscope.service.collect.health import RULE_ID
from hpcscope.store import Store
from tests.support.processes import api, kill9, serve, stop, wait_for
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

NODE = "gpu07"


class Exporter:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.mode_file = root / "mode"
        self.log = root / "exporter.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.mode("ok")

    def mode(self, mode: str) -> None:
        self.mode_file.write_text(mode)

    def start(self) -> None:
        with self.log.open("ab") as handle:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.faults.misbehaving_exporter",
                    str(self.port),
                    str(self.mode_file),
                    NODE,
                ],
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def down(self) -> None:
        assert self.process is not None
        kill9(self.process)


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Exporter]:
    exporter = Exporter(tmp_path)
    exporter.start()
    try:
        yield exporter
    finally:
        if exporter.process is not None:
            stop(exporter.process)


def _target(base: str) -> dict[str, Any] | None:
    targets = api(base, "/api/cluster")["targets"]
    return targets[0] if targets else None


def test_exporter_faults_are_failed_scrapes_and_gaps_never_zeros(
    tmp_path: Path, exporter: Exporter
) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text(
        json.dumps(
            [
                {
                    "targets": [f"127.0.0.1:{exporter.port}"],
                    "labels": {"exporter": "dcgm", "node": NODE},
                }
            ]
        )
    )
    config = tmp_path / "hpcscope.yaml"
    config.write_text(
        f"targets_path: {targets}\nscrape_interval_seconds: 1\nscrape_timeout_seconds: 1.5\n"
    )
    store_path = tmp_path / "store.duckdb"
    server, base = serve(store_path, free_port(), tmp_path / "server.log", "--config", str(config))
    seen: dict[str, str] = {}
    try:

        def succeeded_after(previous: str | None) -> bool:
            target = _target(base)
            return bool(
                target
                and target["last_success"]
                and target["last_success"] != previous
                and target["failures_since_success"] == 0
            )

        wait_for(lambda: succeeded_after(None), "a first good scrape")
        for mode, expected in [
            ("error", "HTTP 500"),
            ("slow", "timeout"),
            ("garbage", "no samples"),
            ("down", "refused"),
        ]:
            if mode == "down":
                exporter.down()
            else:
                exporter.mode(mode)

            def failing(expected: str = expected) -> str | None:
                target = _target(base)
                error = (target or {}).get("last_error") or ""
                return (
                    error
                    if target and target["failures_since_success"] >= 2 and (expected in error)
                    else None
                )

            seen[mode] = wait_for(failing, f"the {mode} fault recorded", timeout=60)
            assert server.poll() is None, f"the server died on {mode}"
            last = (_target(base) or {})["last_success"]
            exporter.mode("ok")
            if mode == "down":
                exporter.start()
            wait_for(partial(succeeded_after, last), f"recovery after {mode}", timeout=60)
        exporter.mode("flap")
        wait_for(
            lambda: (_target(base) or {}).get("failures_since_success") == 1, "a flap", timeout=60
        )
        exporter.mode("ok")
        wait_for(lambda: succeeded_after(None), "recovery after flapping", timeout=60)
        alerts = [a for a in api(base, "/api/alerts")["alerts"] if a["rule_id"] == RULE_ID]
        assert server.poll() is None  # it never crashed
    finally:
        stop(server)

    with Store(store_path, read_only=True) as store:
        gaps = store.query("SELECT * FROM collection_gaps ORDER BY start_ts").to_pylist()
        failed = store.query("SELECT error FROM scrapes WHERE NOT ok").to_pylist()
        for gap in gaps:
            inside = store.query(
                "SELECT count(*) AS n FROM gpu_samples WHERE node = ? AND ts > ? AND ts < ?",
                [NODE, gap["start_ts"], gap["end_ts"]],
            ).to_pylist()[0]["n"]
            assert inside == 0, f"samples inside the gap {gap}"
        zeros = store.query(
            "SELECT count(*) AS n FROM gpu_samples WHERE sm_active_ratio = 0 AND power_watts = 0"
        ).to_pylist()[0]["n"]
    reasons = " | ".join(g["reason"] for g in gaps)
    print(f"{len(gaps)} gaps, {len(failed)} failed scrapes; reasons: {reasons}")
    for expected in ("HTTP 500", "timeout", "no samples", "refused"):
        assert expected in reasons, f"no gap for {expected}"
        assert any(expected in (row["error"] or "") for row in failed)
    assert zeros == 0
    assert {a["subject"] for a in alerts} == {f"http://127.0.0.1:{exporter.port}/metrics"}
