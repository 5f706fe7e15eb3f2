"""``hpcscope nccl analyze``: read logs and flight-recorder dumps, analyse, build the report.

Files are told apart by content, not by name: a pickle or a JSON object with ``entries`` and
``pg_config`` is a flight-recorder dump, anything else a text log (NCCL, PyTorch, nccl-tests,
Megatron lines, mixed in any order). A directory stands for the files under it. A file that
cannot be read is reported in ``errors`` and the rest is still analysed (nothing already read
is lost). The report is the JSON contract documented in ``docs/nccl.md``
(:data:`SCHEMA`); :mod:`hpcscope.service.nccl.report` builds its sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcscope.analysis.hangs.findings import nccl_findings
from hpcscope.analysis.hangs.localize import localize_hang
from hpcscope.ingest.nccl.flight_recorder import (
    looks_like_flight_recorder,
    parse_flight_recorder,
    rank_from_name,
)
from hpcscope.ingest.nccl.logs import NcclLogError, NcclLogParse, parse_nccl_log_bytes
from hpcscope.model.collectives import FlightRecorderDump
from hpcscope.model.errors import SourceError
from hpcscope.model.nccl import CommInitRecord, InitTimingsRecord, TopoCommRecord
from hpcscope.service.nccl import report as nccl_report
from hpcscope.service.nccl.contracts import InputProblem, NcclReport

SCHEMA = "hpcscope.nccl.analyze/1"


@dataclass(slots=True)
class NcclInputs:
    """Everything read from the files given."""

    logs: list[NcclLogParse] = field(default_factory=list)
    dumps: list[FlightRecorderDump] = field(default_factory=list)
    errors: list[SourceError] = field(default_factory=list)


def expand_paths(paths: Sequence[Path]) -> list[Path]:
    """Files as given, directories replaced by the files under them (sorted)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file()))
        else:
            files.append(path)
    return files


def read_inputs(paths: Sequence[Path]) -> NcclInputs:
    """Read and parse every file; unreadable ones land in ``errors``."""
    inputs = NcclInputs()
    for path in expand_paths(paths):
        try:
            data = path.read_bytes()
        except OSError as exc:
            inputs.errors.append(
                NcclLogError(f"cannot read: {exc.strerror or exc}", source=str(path))
            )
            continue
        if looks_like_flight_recorder(data):
            try:
                dump = parse_flight_recorder(data, source=str(path), rank=rank_from_name(path))
            except SourceError as exc:
                inputs.errors.append(exc)
                continue
            inputs.dumps.append(dump)
        else:
            inputs.logs.append(parse_nccl_log_bytes(data, source=str(path)))
    return inputs


def world_size_from_logs(logs: Sequence[NcclLogParse]) -> int | None:
    """The largest ``nranks`` NCCL printed for a communicator (the world communicator's)."""
    sizes = [
        r.nranks
        for log in logs
        for r in log.nccl
        if isinstance(r, CommInitRecord | TopoCommRecord | InitTimingsRecord)
    ]
    return max(sizes) if sizes else None


def report(paths: Sequence[Path], *, world_size: int | None = None) -> NcclReport:
    """Read, analyse and report: the typed ``--json`` document (what the CLI emits)."""
    inputs = read_inputs(paths)
    source = "given" if world_size is not None else None
    if world_size is None:
        world_size = world_size_from_logs(inputs.logs)
        source = "nccl_init" if world_size is not None else None
    records = [r for log in inputs.logs for r in log.nccl]
    events = [e for log in inputs.logs for e in log.watchdog]
    hang = localize_hang(
        watchdog=events, dumps=inputs.dumps, world_size=world_size, world_size_source=source
    )
    findings = nccl_findings(records, events)
    tests = [t for log in inputs.logs for t in log.nccl_tests]
    return NcclReport(
        schema_=SCHEMA,
        inputs=[nccl_report.log_input(log) for log in inputs.logs]
        + [nccl_report.dump_input(d) for d in inputs.dumps],
        errors=[
            InputProblem.model_validate({**e.to_dict(), "bound": getattr(e, "bound", None)})
            for e in inputs.errors
        ],
        nccl=nccl_report.nccl_section(records),
        findings=[nccl_report.finding(f) for f in findings]
        + nccl_report.nccl_tests_findings(tests),
        watchdog=[nccl_report.watchdog_event(e) for e in events],
        hang=nccl_report.hang_section(hang),
        nccl_tests=[nccl_report.nccl_tests_result(t) for t in tests],
        stragglers=nccl_report.stragglers([s for log in inputs.logs for s in log.stragglers]),
    )


# The plain JSON values of the document: the capability's tests and the docs' key check read
# it as JSON, whatever its shape.
def analyze(paths: Sequence[Path], *, world_size: int | None = None) -> dict[str, Any]:
    """Read, analyse and report (the ``--json`` document as plain JSON values; :func:`report`
    is its typed form)."""
    return report(paths, world_size=world_size).model_dump(mode="json")
