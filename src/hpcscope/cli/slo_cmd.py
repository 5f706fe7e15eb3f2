"""``hpcscope slo``: the SLOs over the jobs you may see, from a running server (``GET /api/slo``).

The server computes every figure over your scope (a researcher's own jobs, a team lead's
accounts, an admin's cluster; ``docs/slo.md``); credentials as for ``hpcscope jobs``.
"""

from __future__ import annotations

from typing import Any

import typer

from hpcscope.cli.client import (
    FORMAT_OPTION,
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
)
from hpcscope.cli.output import print_json, print_table
from hpcscope.cli.tables import Column, table_format


def register(app: typer.Typer) -> None:
    app.command("slo")(slo)


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def _burn(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _window(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def slo(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """Show the SLOs: SLI, error budget left, burn rates and firing burn-rate alerts.

    ``--format tsv`` prints the SLO table alone (one line per SLO).
    """
    fmt = table_format(output_format)
    # the server's JSON as sent (SloReport): a client command does not import the contracts
    data: dict[str, Any] = api_get(url, "/api/slo", user, password, json_output, token=token)
    if json_output:
        print_json(data)
        return
    windows = [b["window_seconds"] for b in data["slos"][0]["burns"]] if data["slos"] else []
    rows = [
        [
            s["title"],
            _percent(s["objective_ratio"]),
            _percent(s["sli_ratio"]),
            f"{s['good']:,.0f} / {s['total']:,.0f} {s['event_unit']}",
            _percent(s["budget_remaining_ratio"]),
            *(_burn(b["burn_rate"]) for b in s["burns"]),
            ", ".join(a["name"] for a in s["alerts"] if a["firing"]) or "none",
        ]
        for s in data["slos"]
    ]
    days = data["window_seconds"] / 86400
    print_table(
        f"SLOs over {data['scope']}, last {days:g} days",
        [
            Column("SLO", priority=0),
            Column("objective", priority=1, numeric=True),
            Column("SLI", priority=1, numeric=True),
            Column("good / valid events", priority=2, numeric=True),
            Column("error budget left", priority=1, numeric=True),
            *(Column(f"burn rate {_window(w)}", priority=3, numeric=True) for w in windows),
            Column("firing alerts", priority=1, wrap=True),
        ],
        rows,
        fmt=fmt,
    )
    if fmt == "tsv":
        return
    waits = [
        [
            w["partition"],
            w["qos"],
            w["jobs"],
            f"{w['p50_wait_seconds'] / 60:.1f}",
            f"{w['p95_wait_seconds'] / 60:.1f}",
        ]
        for w in data["queue_waits"]
    ]
    print_table(
        "Queue waits (submit to start) of jobs started in the window",
        [
            Column("partition", priority=0),
            Column("QOS", priority=0),
            Column("jobs", priority=1, numeric=True),
            Column("p50 wait (min)", priority=1, numeric=True),
            Column("p95 wait (min)", priority=1, numeric=True),
        ],
        waits,
    )
    causes = [[cause, count] for cause, count in data["ended_jobs_by_cause"].items()]
    print_table(
        "Ended jobs by cause",
        [Column("cause", priority=0), Column("jobs", priority=0, numeric=True)],
        causes,
    )
