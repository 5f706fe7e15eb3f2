"""A self-contained HTML report of a trace analysis (no script, no CDN: inline CSS and SVG).

Rendered from the JSON document (:func:`hpcscope.service.traces.pipeline.to_json`), so the report
and ``--json`` never disagree.
"""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, select_autoescape

from hpcscope.service.traces.document import AnalysisJson

PHASE_COLOURS = {
    "data_load": "#0ea5e9",
    "forward": "#22c55e",
    "backward": "#15803d",
    "communication": "#a855f7",
    "optimizer": "#eab308",
    "barrier_wait": "#dc2626",
    "other": "#94a3b8",
}


_ENV = Environment(
    loader=PackageLoader("hpcscope.service.traces", "templates"),
    autoescape=select_autoescape(default=True),
)


def render_report(doc: AnalysisJson, *, width: int = 900) -> str:
    """The HTML report for an analysis document."""
    from hpcscope.analysis.traces.rank_timeline import PHASES

    longest = max((sum(doc["phases"][r].values()) for r in doc["phases"]), default=0.0) or 1.0
    scale = (width - 140) / longest
    bars = []
    for i, rank in enumerate(doc["phases"]):
        x = 60.0
        segments = []
        for phase in PHASES:
            seconds = doc["phases"][rank][phase]
            w = seconds * scale
            segments.append(
                {
                    "x": round(x, 2),
                    "w": round(w, 2),
                    "phase": phase,
                    "ms": seconds * 1000,
                    "colour": PHASE_COLOURS[phase],
                }
            )
            x += w
        bars.append(
            {
                "rank": rank,
                "y": 8 + 24 * i,
                "segments": segments,
                "end": x,
                "total": sum(doc["phases"][rank].values()) * 1000,
            }
        )
    return _ENV.get_template("traces_report.html").render(
        doc=doc, phases=PHASES, colours=PHASE_COLOURS, bars=bars, width=width
    )
