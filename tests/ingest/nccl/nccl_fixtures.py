"""Where the NCCL fixtures live (see ``tests/fixtures/nccl/PROVENANCE.md``)."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import FIXTURES

NCCL = FIXTURES / "nccl"
FR_CASES = NCCL / "nvrx_fr_traces"
CASES = ("gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd")
#: Files of the pool that are not logs (a reference table, a docs example): every line unknown.
NOT_LOGS = {
    "nvrx_flight_recorder_attribution_reference.log",
    "nvrx_straggler_scores_docs_example.log",
}


def log_files() -> list[Path]:
    """Every ``.log`` fixture copied from the shared pool."""
    return sorted(NCCL.glob("*.log"))


def case_dumps(case: str) -> list[Path]:
    """The 16 pickles of one NVRx fault-injection case."""
    return sorted((FR_CASES / case).glob("_dump_*"))
