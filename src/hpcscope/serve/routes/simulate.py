"""The step player (``/step``) and the straggler simulator (``/simulate``), with JSON twins.

Both pages are educational and carry no job data: they read only the topology (GPU count,
NVLink and NIC bandwidths, the price of a GPU-hour). They follow the site's
``anonymous_diagram`` setting, because they are reached from the cluster diagram and reveal the
same things it does (the cluster's shape): when the site lets anonymous visitors see the
diagram, they may play the step and run the simulator too; otherwise a login is needed, like
every other page. ``docs/simulate.md`` records this choice.

Bad parameters get 422 with FastAPI's error shape, ``{"detail": [{"loc": ["query", field],
"msg": ...}]}``, both for what the request model rejects and for what the models reject.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.serve.auth import service_of, site_viewer
from hpcscope.serve.templating import render
from hpcscope.service.simulate.contracts import ExpertStepPlayer, SimulationDocument, StepPlayer
from hpcscope.service.simulate.expert_player import expert_player
from hpcscope.service.simulate.inputs import (
    DEEPEP_LAYER_ALLTOALL_BYTES,
    MAX_REQUEST_CELLS,
    ExpertStepRequest,
    SimulationInputError,
    SimulationRequest,
    StepRequest,
    gradient_bytes,
)
from hpcscope.service.simulate.simulation import report_json, run_simulation
from hpcscope.service.simulate.step_player import step_player

router = APIRouter()


Viewer = Annotated[Principal | None, Depends(site_viewer)]


def _unprocessable(exc: SimulationInputError, value: object = None) -> JSONResponse:
    return JSONResponse(
        {
            "detail": [
                {
                    "type": "value_error",
                    "loc": ["query", *exc.field.split(".")],
                    "msg": exc.message,
                    "input": value,
                }
            ]
        },
        status_code=422,
    )


@router.get("/step")
def step_page(request: Request, principal: Viewer) -> Response:
    """Play one training step of the cluster, with and without a straggler GPU."""
    topology = service_of(request).topology
    gpus = [f"{gpu.node} · GPU {gpu.index}" for gpu in topology.gpus]
    return render(
        request,
        "step.html",
        {
            "topology": topology,
            "gpu_labels": gpus,
            "defaults": StepRequest(),
            "expert_defaults": ExpertStepRequest(),
            "mode": "expert" if request.query_params.get("mode") == "expert" else "data",
        },
        principal=principal,
    )


@router.get("/api/step", response_model=StepPlayer)
def step_api(request: Request, principal: Viewer, params: Annotated[StepRequest, Query()]) -> Any:
    """One step of every GPU of the cluster, healthy and with the straggler (the player's data).

    Times in seconds from the start of the step; see ``docs/simulate.md`` for the schema.
    """
    try:
        return step_player(params, service_of(request).topology)
    except SimulationInputError as exc:
        return _unprocessable(exc, request.query_params.get(exc.field))


@router.get("/api/step/expert", response_model=ExpertStepPlayer)
def expert_step_api(
    request: Request, principal: Viewer, params: Annotated[ExpertStepRequest, Query()]
) -> Any:
    """One MoE step of every GPU, the expert all-to-all on a second stream (the player's
    expert mode), healthy and with the straggler; schema in ``docs/simulate.md``."""
    try:
        return expert_player(params, service_of(request).topology)
    except SimulationInputError as exc:
        return _unprocessable(exc, request.query_params.get(exc.field))


@router.get("/simulate")
def simulate_page(request: Request, principal: Viewer) -> Response:
    """The straggler simulator: efficiency and lost GPU-hours from 8 to 16,384 GPUs."""
    topology = service_of(request).topology
    defaults = SimulationRequest()
    return render(
        request,
        "simulate.html",
        {
            "topology": topology,
            "defaults": defaults,
            "gradient_bytes": gradient_bytes(defaults.model_parameters, defaults.precision),
            "max_cells": MAX_REQUEST_CELLS,
            "deepep_bytes": DEEPEP_LAYER_ALLTOALL_BYTES,
        },
        principal=principal,
    )


@router.get("/api/simulate", response_model=SimulationDocument)
async def simulate_api(
    request: Request, principal: Viewer, params: Annotated[SimulationRequest, Query()]
) -> Any:
    """Simulated step time, efficiency, barrier wait and lost GPU-hours per GPU count.

    At most 20 million GPU-steps per request (16,384 GPUs x 1,000 steps); the CLI has no cap.
    """
    topology = service_of(request).topology
    try:
        report = await run_in_threadpool(
            run_simulation, params, topology, max_cells=MAX_REQUEST_CELLS
        )
    except SimulationInputError as exc:
        return _unprocessable(exc, request.query_params.get(exc.field))
    return report_json(report)
