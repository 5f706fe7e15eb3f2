"""The GET routes the API load bench and the soak ask for: every route a page loads or polls,
and the documented API (``/api/openapi.json``'s GET routes), with the parameters each needs.

Each :class:`Route` has a name (the key of the bench's per-endpoint figures), a path template
(``{job}``: one of the client's visible jobs; ``{analysis}``: a trace analysis it may see;
``{element}``, ``{node}``: a GPU and a node of the topology; ``{path}``: the topology's
checkpoint root), whether it is a page (HTML: a session cookie or HTTP Basic, never an API
token), its weight in the mix and whether it is **kept** (the goal of ``bench/api_load.py``
applies: the read lane's routes and every route a browser tab or a script polls, answered from
kept state, ``serve/kept.py``). The mix is the kept routes, weighted as a fleet of open tabs
polls them: the diagram's live state every 7 s, the overview's live part every 5 s, the job
list and job pages as people click, the reports now and then.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    """One GET route of the bench (module docstring)."""

    name: str
    path: str
    page: bool = False
    weight: int = 0
    kept: bool = False
    admin: bool = False
    """Only an admin may ask (others get 403/404: they ask as the admin client)."""


ROUTES: tuple[Route, ...] = (
    # the read lane's routes (issue 17) and every polled GET (kept state)
    Route("diagram_live", "/api/diagram/state", weight=4, kept=True),
    Route("overview_live", "/fragments/overview", page=True, weight=4, kept=True),
    Route("job_list", "/api/jobs", weight=2, kept=True),
    Route("job_page", "/jobs/{job}", page=True, weight=2, kept=True),
    Route("job_api", "/api/jobs/{job}", weight=1, kept=True),
    Route("diagram", "/diagram", page=True, weight=1, kept=True),
    Route("cluster", "/api/cluster", weight=2, kept=True),
    Route("overview", "/", page=True, weight=1, kept=True),
    Route("slo", "/api/slo", weight=1, kept=True),
    Route("slo_page", "/slo", page=True, weight=1, kept=True),
    Route("chargeback", "/api/chargeback", weight=1, kept=True),
    Route("chargeback_page", "/chargeback", page=True, weight=1, kept=True),
    Route("alerts", "/api/alerts", weight=1, kept=True),
    Route("alerts_page", "/alerts", page=True, weight=1, kept=True),
    Route("access", "/api/access?path={path}", weight=1, kept=True),
    Route("access_page", "/access?path={path}", page=True, weight=1, kept=True),
    Route("traces", "/api/traces", weight=1, kept=True),
    Route("traces_page", "/traces", page=True, weight=1, kept=True),
    Route("jobs_page", "/jobs", page=True, weight=1, kept=True),
    Route("job_timeseries", "/api/jobs/{job}/timeseries", weight=1, kept=True),
    # every other GET a page loads, and the rest of the documented API: measured alone
    Route("job_phases", "/api/jobs/{job}/phases"),
    Route("job_alerts", "/api/jobs/{job}/alerts"),
    Route("job_notes", "/api/jobs/{job}/notes"),
    Route("diagram_node", "/diagram?node={node}", page=True),
    Route("diagram_card", "/diagram/card/{element}", page=True),
    Route("diagram_decision", "/diagram/decision", page=True),
    Route("diagram_api", "/api/diagram"),
    Route("diagram_element", "/api/diagram/elements/{element}"),
    Route("chargeback_trend", "/api/chargeback/trend"),
    Route("chargeback_csv", "/api/chargeback.csv"),
    Route("trace_api", "/api/traces/{analysis}"),
    Route("whoami", "/api/whoami"),
    Route("tokens", "/api/tokens"),
    Route("notify_preferences", "/api/notify/preferences"),
    Route("notify_audit", "/api/notify/audit", admin=True),
    Route("step", "/api/step"),
    Route("simulate", "/api/simulate"),
    Route("metrics", "/metrics", admin=True),
    Route("healthz", "/healthz"),
    Route("trace_page", "/traces/{analysis}", page=True),
    Route("step_page", "/step", page=True),
    Route("step_expert", "/api/step/expert"),
    Route("simulate_page", "/simulate", page=True),
    Route("tokens_page", "/tokens", page=True),
    Route("notify_page", "/notify", page=True),
    Route("chargeback_report", "/chargeback/report?account=vision", page=True),
    Route("login_page", "/login", page=True),
    Route("api_docs", "/api/docs", page=True),
    Route("openapi", "/api/openapi.json"),
)
BY_NAME = {route.name: route for route in ROUTES}
#: The mix: the kept routes and their weights.
MIX: tuple[tuple[str, int], ...] = tuple((r.name, r.weight) for r in ROUTES if r.kept)
