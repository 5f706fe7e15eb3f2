"""The typed JSON of the trace analysis document names the contract's keys, and only those.

``service/traces/document.py`` types the dicts the code builds and reads (the command line
prints them without pydantic); the contracts declare the same documents for the API. These
tests fail when a key is added to, renamed in or dropped from one and not the other.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from hpcscope.analysis.traces.straggler_evidence import EvidenceJson
from hpcscope.service.traces import comm_contracts as comm
from hpcscope.service.traces import contracts
from hpcscope.service.traces import document as typed


def _keys(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(
    ("json_type", "model"),
    [
        (typed.AnalysisJson, contracts.TraceAnalysisDocument),
        (typed.StepJson, contracts.StepEntry),
        (EvidenceJson, contracts.EvidenceItem),
        (typed.StragglerJson, contracts.StragglerEntry),
        (typed.WhatIfJson, contracts.WhatIf),
        (typed.WindowJson, contracts.TimeWindow),
        (typed.CollectivesJson, contracts.Collectives),
        (typed.SourceJson, contracts.TraceSource),
        (typed.CommClassesJson, comm.CommClasses),
        (typed.CommClassJson, comm.CommClass),
        (typed.CommSecondsJson, comm.CommSeconds),
        (typed.CommRankStepJson, comm.CommRankStep),
        (typed.CommStepJson, comm.CommStep),
        (typed.CommStragglerJson, comm.CommStraggler),
        (typed.UnclassifiedJson, comm.Unclassified),
    ],
)
def test_the_typed_json_names_the_contracts_keys(json_type: type, model: type[BaseModel]) -> None:
    assert set(json_type.__annotations__) == _keys(model)


def test_a_ranks_figures_are_its_step_time_and_its_phases() -> None:
    """``StepJson.ranks`` and ``AnalysisJson.phases`` are dicts by name: the names are these."""
    assert _keys(contracts.RankStep) == {"step_seconds"} | _keys(contracts.PhaseSeconds)
