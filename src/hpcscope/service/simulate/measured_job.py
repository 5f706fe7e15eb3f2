"""Read the JSON of ``hpcscope traces analyze --json`` as a measured job for calibration.

The contract (issue 3, ``docs/simulate.md``)::

    {"ranks": [0, 1, ...], "steps": N,
     "phases": {"<rank>": {"<phase>": mean_seconds_per_step, ...}, ...},
     "per_step": [...],
     "stragglers": [{"rank": r, "phase": "backward", "excess_seconds_per_step": x, "score": s}],
     "what_if": {"actual_step_seconds": a, "ideal_step_seconds": i, "slowdown": a / i,
                 "worst_rank_share": m}}

Fields beyond these are ignored (the trace report carries more). From ``per_step`` only each
element's ``excess_seconds`` (the slowest rank's excess over the peer median in that step) is
read, when present, to estimate the jitter. Bad input raises a
:class:`~hpcscope.model.errors.SourceError` naming the file, the line and column of a JSON
syntax error, or the field of a schema error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpcscope.analysis.simulate.calibration import MeasuredJob, MeasuredStraggler
from hpcscope.model.bounds import loads_json
from hpcscope.model.errors import SourceError


class _Straggler(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rank: int
    phase: str
    excess_seconds_per_step: float = Field(0.0, allow_inf_nan=False)
    score: float | None = None


class _WhatIf(BaseModel):
    model_config = ConfigDict(extra="ignore")

    actual_step_seconds: float | None = Field(None, ge=0, allow_inf_nan=False)
    ideal_step_seconds: float | None = Field(None, ge=0, allow_inf_nan=False)


class _TraceReport(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ranks: list[int] = Field(min_length=1)
    steps: int = Field(ge=1)
    phases: dict[int, dict[str, float]]
    per_step: list[Any] = Field(default_factory=list)
    stragglers: list[_Straggler] = Field(default_factory=list)
    what_if: _WhatIf | None = None


def parse_measured_job(text: str, *, source: str) -> MeasuredJob:
    """Parse a trace report (see module docstring).

    Raises:
        SourceError: invalid JSON (with line and column) or a field that breaks the contract.
    """
    try:
        raw = loads_json(text, source=source)
    except json.JSONDecodeError as exc:
        raise SourceError(
            f"not valid JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno
        ) from None
    try:
        report = _TraceReport.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"] if part != "[key]")
        raise SourceError(
            f"{first['msg']} (expected the JSON of `hpcscope traces analyze --json`)",
            source=source,
            field=field,
        ) from None
    for rank, phases in report.phases.items():
        for phase, seconds in phases.items():
            if not seconds >= 0 or seconds == float("inf"):
                raise SourceError(
                    f"not a duration: {seconds}", source=source, field=f"phases.{rank}.{phase}"
                )
    excess: list[float] = []
    for item in report.per_step:
        value = item.get("excess_seconds") if isinstance(item, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            excess.append(float(value))
    return MeasuredJob(
        ranks=tuple(report.ranks),
        steps=report.steps,
        phases=report.phases,
        stragglers=tuple(
            MeasuredStraggler(s.rank, s.phase, s.excess_seconds_per_step, s.score)
            for s in report.stragglers
        ),
        step_excess_seconds=tuple(excess),
        actual_step_seconds=report.what_if.actual_step_seconds if report.what_if else None,
    )


def load_measured_job(path: str | Path) -> MeasuredJob:
    """Read a trace report file.

    Raises:
        SourceError: unreadable file, invalid JSON or a broken contract.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SourceError(f"cannot read: {reason}", source=str(path)) from None
    return parse_measured_job(text, source=str(path))
