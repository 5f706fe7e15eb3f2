"""The three SLOs as the site configured them (``slo_*`` settings, ``docs/settings.md``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.analysis.slo.budget import WORKBOOK_PAIRS, BurnRatePair
from hpcscope.service.settings import Settings

QUEUE_WAIT = "queue_wait"
JOB_SUCCESS = "job_success"
GPU_EFFICIENCY = "gpu_efficiency"


@dataclass(frozen=True, slots=True)
class SloDefinition:
    """One SLO: its name, what its SLI measures, its event unit and objective."""

    slo: str
    title: str
    measures: str
    event_unit: str
    objective_ratio: float


@dataclass(frozen=True, slots=True)
class SloConfig:
    """Objectives, window and the alert pairs of the site's SLOs."""

    window_seconds: float
    queue_wait_seconds: float
    definitions: tuple[SloDefinition, ...]
    pairs: tuple[BurnRatePair, ...] = WORKBOOK_PAIRS
    evaluate_every_cycles: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> SloConfig:
        wait = settings.slo_queue_wait_seconds
        return cls(
            window_seconds=settings.slo_window_days * 86400.0,
            queue_wait_seconds=wait,
            evaluate_every_cycles=settings.slo_evaluate_every_cycles,
            definitions=(
                SloDefinition(
                    QUEUE_WAIT,
                    "Queue wait",
                    f"share of jobs that started within {wait:g} s of their submission "
                    "(Slurm submit to start)",
                    "jobs",
                    settings.slo_queue_wait_objective_ratio,
                ),
                SloDefinition(
                    JOB_SUCCESS,
                    "Successful jobs",
                    "share of ended jobs (cancelled ones not counted) that completed with "
                    "exit code 0",
                    "jobs",
                    settings.slo_job_success_objective_ratio,
                ),
                SloDefinition(
                    GPU_EFFICIENCY,
                    "Real GPU efficiency",
                    "useful GPU-hours (SM active x time) / allocated GPU-hours of summarised jobs",
                    "GPU-seconds",
                    settings.slo_gpu_efficiency_objective_ratio,
                ),
            ),
        )

    def definition(self, slo: str) -> SloDefinition:
        """The definition of one SLO by name.

        Raises:
            KeyError: no SLO of that name.
        """
        for definition in self.definitions:
            if definition.slo == slo:
                return definition
        raise KeyError(slo)
