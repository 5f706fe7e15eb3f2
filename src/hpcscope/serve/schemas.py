"""The JSON Schema of every document the API and the CLI emit, committed in ``docs/schemas/``.

``python -m hpcscope.serve.schemas`` (``make schemas``) rewrites ``docs/schemas/``;
``python -m hpcscope.serve.schemas --check`` says which committed file differs from the code
(``tests/service/test_schemas.py`` runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from hpcscope.serve.contracts import ClusterState, Health, JobReportWithNotes, WhoAmI
from hpcscope.serve.diagram.contracts import DiagramPage, DiagramState
from hpcscope.service.alerts.contracts import (
    AlertDocument,
    AlertList,
    JobAlerts,
)
from hpcscope.service.alerts.file_access import AccessReport
from hpcscope.service.chargeback.contracts import ChargebackReport, ChargebackTrend
from hpcscope.service.diagram.cards import ElementCard
from hpcscope.service.identity.contracts import CreatedTokenDocument, TokenList
from hpcscope.service.jobs.contracts import JobList, JobReportDocument, JobTimeseries
from hpcscope.service.nccl.contracts import NcclReport
from hpcscope.service.notify.contracts import (
    AuditLog,
    JobNotesDocument,
    PreferencesDocument,
)
from hpcscope.service.simulate.contracts import (
    ExpertStepPlayer,
    SimulationCurve,
    SimulationDocument,
    StepPlayer,
    WhatIfCurve,
)
from hpcscope.service.slo.contracts import SloReport
from hpcscope.service.traces.capture_contracts import JobPhases, JobReportWithPhases
from hpcscope.service.traces.contracts import (
    StoredTraceReport,
    TraceAnalysisDocument,
    TraceList,
    TraceReport,
    TraceSummary,
)

#: Where the schemas are committed, relative to the repository root.
SCHEMA_DIR = Path("docs/schemas")

#: The command that regenerates them (named in the drift test's message).
REGENERATE = "python -m hpcscope.serve.schemas  (or: make schemas)"

#: File stem -> the contract it describes: a pydantic model, or a frozen dataclass of the
#: service whose schema pydantic derives (the diagram's element card).
CONTRACTS: Mapping[str, type[Any]] = {
    "cluster": ClusterState,
    "health": Health,
    "whoami": WhoAmI,
    "diagram-card": ElementCard,
    "diagram-page": DiagramPage,
    "diagram-state": DiagramState,
    "job-report": JobReportDocument,
    "job-alerts": JobAlerts,
    "alert": AlertDocument,
    "alert-list": AlertList,
    "job-list": JobList,
    "job-timeseries": JobTimeseries,
    "nccl-report": NcclReport,
    "simulation": SimulationDocument,
    "simulation-curve": SimulationCurve,
    "simulation-what-if": WhatIfCurve,
    "step-player": StepPlayer,
    "traces-analysis": TraceAnalysisDocument,
    "traces-list": TraceList,
    "traces-summary": TraceSummary,
    "traces-report": TraceReport,
    "traces-report-stored": StoredTraceReport,
    "token-list": TokenList,
    "token-created": CreatedTokenDocument,
    "notify-job-notes": JobNotesDocument,
    "notify-job-report": JobReportWithNotes,
    "notify-preferences": PreferencesDocument,
    "notify-audit": AuditLog,
    "slo-report": SloReport,
    "job-report-with-phases": JobReportWithPhases,
    "job-phases": JobPhases,
    "chargeback": ChargebackReport,
    "chargeback-trend": ChargebackTrend,
    "access-report": AccessReport,
    "step-player-expert": ExpertStepPlayer,
}

#: Contracts that only the CLI emits (``/api/openapi.json`` does not list them).
CLI_ONLY: frozenset[str] = frozenset(
    {
        "nccl-report",
        "simulation-curve",
        "simulation-what-if",
        "traces-analysis",
        "notify-job-report",
    }
)


# A JSON Schema is a free-form JSON object (pydantic's output, written as it is).
def schema_of(contract: type[Any]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what ``contract`` serialises to."""
    schema = TypeAdapter(contract).json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def schema_texts() -> dict[str, str]:
    """File name -> text of every schema, as :func:`write` writes them."""
    return {
        f"{name}.schema.json": json.dumps(schema_of(contract), indent=2, sort_keys=True) + "\n"
        for name, contract in CONTRACTS.items()
    }


def write(directory: Path) -> list[Path]:
    """Write every schema into ``directory`` and remove stale ``*.schema.json`` files."""
    directory.mkdir(parents=True, exist_ok=True)
    texts = schema_texts()
    for stale in directory.glob("*.schema.json"):
        if stale.name not in texts:
            stale.unlink()
    written = []
    for name, text in texts.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def drift(directory: Path) -> list[str]:
    """One line per file of ``directory`` that is missing, stale or differs from the code."""
    texts = schema_texts()
    problems = []
    for name, text in texts.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs from the code")
    for path in sorted(directory.glob("*.schema.json")):
        if path.name not in texts:
            problems.append(f"{path}: no contract of that name (stale)")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Write (default) or check the schemas; exit status 1 when ``--check`` finds drift."""
    parser = argparse.ArgumentParser(prog="python -m hpcscope.serve.schemas")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="default: docs/schemas")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = drift(args.dir)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"run `{REGENERATE}` to update", file=sys.stderr)
        return 1 if problems else 0
    for path in write(args.dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
