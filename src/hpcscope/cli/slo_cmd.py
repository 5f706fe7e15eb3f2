"""``hpcscope slo``: the SLOs over the jobs you may see, from a running server (``GET /api/slo``).

The server computes every figure over your scope (a researcher's own jobs, a team lead's
accounts, an admin's cluster; ``docs/slo.md``); credentials as for ``hpcscope jobs``.
"""

from __future__ import annotations

from typing import Any

import typer

from hpcscope.cli.client import JSON_OPTION, PASSWORD_OPTION, URL_OPTION, USER_OPTION, api_get
from hpcscope.cli.output import print_json, print_table


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
    json_output: bool = JSON_OPTION,
) -> None:
    """Show the SLOs: SLI, error budget left, burn rates and firing burn-rate alerts."""
    data: dict[str, Any] = api_get(url, "/api/slo", user, password, json_output)
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
            "SLO",
            "Objective",
            "SLI",
            "Good / valid",
            "Budget left",
            *(f"Burn {_window(w)}" for w in windows),
            "Firing",
        ],
        rows,
    )
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
        ["Partition", "QOS", "Jobs", "p50 (min)", "p95 (min)"],
        waits,
        numeric=["Jobs", "p50 (min)", "p95 (min)"],
    )
    causes = [[cause, count] for cause, count in data["ended_jobs_by_cause"].items()]
    print_table("Ended jobs by cause", ["Cause", "Jobs"], causes, numeric=["Jobs"])
