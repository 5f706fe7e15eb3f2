"""What the fuzzer feeds: every parser of outside input, as a function of raw bytes.

Each :class:`Target` turns the fuzzer's bytes into one parser call with the source name
:data:`SOURCE`. The contract every parser must keep (issue 17, "hostile input"): it returns,
or it raises a :class:`~hpcscope.model.errors.SourceError` (a typed error that names the
source, and the position where it knows one); anything else escaping is a crash, and so is an
input that takes longer than the run's per-input bound (``-timeout``, see :mod:`fuzz.run`).

Seeds (``fuzz/corpus/<target>/``) come from the real samples under ``tests/fixtures/`` (see
:mod:`fuzz.seed`), plus one input per structured hostile shape (:mod:`fuzz.hostile`: reference
cycles, shared references, deep nesting, huge counts, gzip and tar bombs), which
:meth:`Target.feed` expands before the call; the fuzzer adds what reaches new code, mutating the
shapes' sizes and envelopes as well as the bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

SOURCE = "fuzz-input"
TS = datetime(2026, 12, 1)


@dataclass(frozen=True)
class Target:
    """One parser under fuzzing.

    Attributes:
        name: the corpus directory name and the command-line name.
        call: feeds the bytes to the parser.
        seeds: paths under the repository (globs) of real inputs to seed the corpus with.
        allowed: the typed errors it may raise (default: :class:`SourceError`, resolved late
            so that importing this module imports no hpcscope code before instrumentation).
    """

    name: str
    call: Callable[[bytes], object]
    seeds: tuple[str, ...]
    allowed: str = "hpcscope.model.errors:SourceError"

    def feed(self, data: bytes) -> object:
        """The parser on ``data``, a hostile shape expanded first (:func:`fuzz.hostile.expand`)."""
        from fuzz.hostile import expand

        return self.call(expand(data))

    def allowed_errors(self) -> tuple[type[BaseException], ...]:
        """The classes named by :attr:`allowed` (comma-separated ``module:Class``)."""
        import importlib

        out: list[type[BaseException]] = []
        for entry in self.allowed.split(","):
            module, _, name = entry.strip().partition(":")
            out.append(getattr(importlib.import_module(module), name))
        return tuple(out)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _exposition(data: bytes) -> object:
    from hpcscope.ingest.exporters.dcgm import dcgm_page_to_samples
    from hpcscope.ingest.exporters.infiniband import infiniband_rows
    from hpcscope.ingest.exposition.parser import ExpositionParser

    parser = ExpositionParser()
    page = parser.parse(data, source=SOURCE)
    again = parser.parse(data, source=SOURCE)  # the second page reads from the key cache
    dcgm_page_to_samples(again, list(again.series), ts=TS, node="n1")
    return infiniband_rows(page, ts=TS, node="n1")


def _file_sd(data: bytes) -> object:
    from hpcscope.ingest.exposition.targets import parse_file_sd

    return parse_file_sd(_text(data), source=SOURCE)


def _lustre(data: bytes) -> object:
    from hpcscope.ingest.exporters.lustre_jobstats import parse_job_stats

    return parse_job_stats(_text(data), source=SOURCE, server="mds1")


def _nccl_log(data: bytes) -> object:
    from hpcscope.ingest.nccl.logs import parse_nccl_log_bytes

    return parse_nccl_log_bytes(data, source=SOURCE)


def _flight_recorder(data: bytes) -> object:
    from hpcscope.ingest.nccl.flight_recorder import parse_flight_recorder

    return parse_flight_recorder(data, source=SOURCE, rank=0)


def _sacct_json(data: bytes) -> object:
    from hpcscope.ingest.slurm.sacct_json import parse_sacct_json

    return parse_sacct_json(data, source=SOURCE)


def _sacct_parsable2(data: bytes) -> object:
    from hpcscope.ingest.slurm.parsable import parse_sacct_parsable2

    return parse_sacct_parsable2(_text(data), source=SOURCE)


def _slurmrestd(data: bytes) -> object:
    from hpcscope.ingest.slurm.rest import (
        parse_slurmrestd_jobs,
        parse_slurmrestd_nodes,
        parse_slurmrestd_partitions,
    )
    from hpcscope.model.errors import SourceError

    out: list[object] = []
    for parse in (parse_slurmrestd_jobs, parse_slurmrestd_nodes, parse_slurmrestd_partitions):
        try:  # one body, read as each of the three documents
            out.append(parse(data, source=SOURCE))
        except SourceError as exc:
            out.append(exc)
    return out


def _slurm_text(data: bytes) -> object:
    from hpcscope.ingest.slurm.sacctmgr import parse_sacctmgr_parsable
    from hpcscope.ingest.slurm.text import (
        parse_sinfo_nodes_text,
        parse_sinfo_partitions_text,
        parse_squeue_text,
    )
    from hpcscope.model.errors import SourceError

    text = _text(data)
    out: list[object] = []
    for parse in (
        parse_squeue_text,
        parse_sinfo_nodes_text,
        parse_sinfo_partitions_text,
        parse_sacctmgr_parsable,
    ):
        try:
            out.append(parse(text, source=SOURCE))
        except SourceError as exc:
            out.append(exc)
    return out


def _job_record(data: bytes) -> object:
    from hpcscope.ingest.slurm.jobmap import parse_job_record

    return parse_job_record(data, source=SOURCE)


def _falco(data: bytes) -> object:
    from hpcscope.ingest.security.falco import parse_falco_lines

    return parse_falco_lines(io.BytesIO(data), source=SOURCE)


def _tetragon(data: bytes) -> object:
    from hpcscope.ingest.security.tetragon import parse_tetragon_lines

    return parse_tetragon_lines(io.BytesIO(data), source=SOURCE)


def _integrity(data: bytes) -> object:
    from hpcscope.ingest.integrity.records import parse_lines

    return parse_lines(enumerate(data.splitlines(), start=1), source=SOURCE)


def _kineto(data: bytes) -> object:
    from hpcscope.ingest.traces.kineto import read_kineto

    return read_kineto(f"{SOURCE}.json", source=SOURCE, stream=io.BytesIO(data))


def _topology(data: bytes) -> object:
    from hpcscope.model.topology import parse_topology

    return parse_topology(_text(data), source=SOURCE)


def _rule_file(data: bytes) -> object:
    import tempfile
    from pathlib import Path

    from hpcscope.service.alerts.rules import load_rule_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{SOURCE}.yaml"
        path.write_bytes(data)
        return load_rule_file(path)


def _upload(data: bytes) -> object:
    """A trace upload's bytes as they arrive, in two chunks, as a tar.gz part."""
    from hpcscope.serve.upload_limits import PartInspector, UploadLimits

    limits = UploadLimits(max_bytes=1 << 20, max_members=64, max_expansion_ratio=100.0)
    inspector = PartInspector(f"{SOURCE}.tar.gz", limits, on_member=lambda: None)
    half = len(data) // 2
    inspector.feed(data[:half])
    inspector.feed(data[half:])
    inspector.finish()
    return inspector.expanded_bytes


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "exposition",
            _exposition,
            ("tests/fixtures/dcgm/*.txt", "tests/fixtures/infiniband/*.prom"),
        ),
        Target("file_sd", _file_sd, ("fuzz/seeds/file_sd/*",)),
        Target("lustre_job_stats", _lustre, ("tests/fixtures/lustre/*.txt",)),
        Target("nccl_log", _nccl_log, ("tests/fixtures/nccl/*.log",)),
        Target(
            "flight_recorder",
            _flight_recorder,
            (
                "tests/fixtures/nccl/pytorch_flight_recorder_dump_rank12.json",
                "tests/fixtures/nccl/nvrx_fr_traces/gpu_error_1st/_dump_[0-3]",
            ),
        ),
        Target("sacct_json", _sacct_json, ("tests/fixtures/slurm/sacct_json_sarc/*.json",)),
        Target(
            "sacct_parsable2",
            _sacct_parsable2,
            ("tests/fixtures/slurm/sacct_parsable2_xdmod/*.log",),
        ),
        Target(
            "slurmrestd",
            _slurmrestd,
            ("tests/fixtures/slurm/slurmrestd_lcrownover/V004*Openapi[JNP]*.json",),
        ),
        Target(
            "slurm_text", _slurm_text, ("tests/fixtures/slurm/cli_text_sckyzo/slurm-26.05.2/*",)
        ),
        Target("job_record", _job_record, ("fuzz/seeds/job_record/*",)),
        Target("falco", _falco, ("tests/fixtures/security/falco/*.json",)),
        Target("tetragon", _tetragon, ("tests/fixtures/security/tetragon/*.json*",)),
        Target("integrity", _integrity, ("fuzz/seeds/integrity/*",)),
        Target("kineto", _kineto, ("fuzz/seeds/kineto/*",)),
        Target("topology", _topology, ("topologies/2x8-h100.yaml",)),
        Target("rule_file", _rule_file, ("deploy/rules/*.yaml",)),
        Target(
            "upload",
            _upload,
            ("fuzz/seeds/upload/*",),
            allowed="hpcscope.model.errors:SourceError, hpcscope.serve.upload_limits:UploadError",
        ),
    )
}
