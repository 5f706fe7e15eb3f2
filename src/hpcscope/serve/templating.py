"""Jinja2 templates and the helpers every page shares.

Pages render through :func:`render`, which adds the principal, the navigation and formatting
filters. Number filters always print a unit: a number on screen says what it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from hpcscope import __version__
from hpcscope.model.access import Principal

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"

#: Top navigation: (path, label). Pages add themselves here when they land.
NAV: list[tuple[str, str]] = [
    ("/", "Cluster"),
    ("/jobs", "Jobs"),
    ("/alerts", "Alerts"),
    ("/access", "Access"),
    ("/diagram", "Diagram"),
    ("/step", "Training step"),
    ("/simulate", "Simulator"),
    ("/traces", "Traces"),
    ("/tokens", "API tokens"),
    ("/notify", "Notifications"),
    ("/slo", "SLOs"),
    ("/chargeback", "Chargeback"),
]

templates = Jinja2Templates(directory=str(TEMPLATES_DIR))
# the templates ship with the package: loaded once, never checked again (Jinja's default asks
# the file system for each template's mtime on every render, and under load each such call
# gives the interpreter lock away and waits for it back: a fifth of a job page's computation
# at 128 nodes)
templates.env.auto_reload = False


def percent(value: float | None, digits: int = 0) -> str:
    """A 0-1 ratio as a percentage string (``0.873`` -> ``87 %``); ``—`` when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value * 100:.{digits}f} %"


def number(value: float | None, digits: int = 1, unit: str = "") -> str:
    """A number with thousands separators and a unit; ``—`` when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def efficiency_bucket(value: float | None) -> str:
    """CSS class for a real-efficiency ratio: eff-unknown, eff-0 (<20 %) ... eff-4 (>=80 %)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "eff-unknown"
    return f"eff-{min(4, max(0, int(value * 5)))}"


templates.env.filters["percent"] = percent
templates.env.filters["number"] = number
templates.env.filters["eff_bucket"] = efficiency_bucket
templates.env.globals["hpcscope_version"] = __version__


def render(
    request: Request,
    name: str,
    context: Mapping[str, object],
    *,
    principal: Principal | None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """Render a page with the shared context (principal, navigation, active path)."""
    base = {"principal": principal, "nav": NAV, "active_path": request.url.path}
    return templates.TemplateResponse(
        request, name, {**base, **context}, status_code=status_code, headers=headers
    )
