"""Builders for the telemetry rule tests: counters as the store holds them, the shipped rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

import polars as pl
import pytest

from hpcscope.model.alerts import RuleSpec
from hpcscope.service.alerts.rules import load_site_rules

T0 = datetime(2026, 12, 1, 12, 0, 0)
STEP = 15.0

Traffic = Callable[[float], Mapping[int, tuple[float, float]]]


@pytest.fixture(scope="session")
def rules() -> dict[str, RuleSpec]:
    """The shipped rule files (deploy/rules)."""
    return load_site_rules(None)


def counters(
    nodes: Mapping[str, Traffic],
    *,
    minutes: float,
    ports: int = 8,
    start: Sequence[float] = (1e12,),
    resets: Mapping[tuple[str, float], int] | None = None,
    errors: Mapping[tuple[str, float], tuple[int, str, float]] | None = None,
) -> pl.DataFrame:
    """``ib_port_counters`` rows: counters integrating ``traffic(t) -> {port: (rx, tx)}``
    (bytes/s) every 15 s; ``resets`` zero a port's counters at a time, ``errors`` add to an
    error counter of a port."""
    rows: list[dict[str, object]] = []
    resets = dict(resets or {})
    errors = dict(errors or {})
    for node, traffic in nodes.items():
        rx = [start[0]] * ports
        tx = [start[0]] * ports
        extra: dict[tuple[int, str], float] = {}
        steps = int(minutes * 60 // STEP)
        for k in range(steps + 1):
            t = k * STEP
            if k:
                now = traffic(t)
                for p in range(ports):
                    r, x = now.get(p, (0.0, 0.0))
                    rx[p] += (r + 2e5) * STEP
                    tx[p] += (x + 2e5) * STEP
            if (node, t) in resets:
                p = resets[node, t]
                rx[p] = tx[p] = 0.0
                extra = {key: 0.0 for key in extra if key[0] != p} | {
                    key: v for key, v in extra.items() if key[0] != p
                }
            if (node, t) in errors:
                p, name, value = errors[node, t]
                extra[p, name] = extra.get((p, name), 0.0) + value
            for p in range(ports):
                row: dict[str, object] = {
                    "ts": T0 + timedelta(seconds=t),
                    "node": node,
                    "device": f"mlx5_{p}",
                    "port": 1,
                    "port_data_received_bytes_total": rx[p],
                    "port_data_transmitted_bytes_total": tx[p],
                    "port_constraint_errors_received_total": extra.get((p, "cr"), 0.0),
                }
                rows.append(row)
    return pl.DataFrame(rows, schema_overrides={"port": pl.Int16})


def port_gpus(nodes: Sequence[str], ports: int = 8) -> dict[tuple[str, str, int], int]:
    return {(n, f"mlx5_{p}", 1): p for n in nodes for p in range(ports)}
