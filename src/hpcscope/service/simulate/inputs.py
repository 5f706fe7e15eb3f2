"""What a simulator or step-player request says, checked, and what the models make of it.

The web API (``GET /api/simulate``, ``GET /api/step``) and the CLI (``hpcscope simulate``)
validate their parameters with :class:`SimulationRequest` / :class:`StepRequest` (pydantic, at
the edge; units in the field names, defaults and bounds in ``docs/simulate.md``) through
:func:`parse_request`. The helpers here turn a checked request into the inputs of the pure
models: the :class:`~hpcscope.analysis.simulate.collectives.Fabric` of a topology and the AllReduce
cost at each GPU count. Every problem, whether pydantic or a model rejects it, comes out as one
:class:`SimulationInputError` naming the request field, so the CLI can exit 2 and the API
answer 422 with the same field names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hpcscope.analysis.simulate.collectives import (
    PRECISION_BYTES,
    AllReduceAlgorithm,
    AllReduceCost,
    CollectiveModelError,
    Fabric,
    allreduce_cost,
)
from hpcscope.analysis.simulate.collectives import gradient_bytes as gradient_bytes  # the API's too
from hpcscope.analysis.simulate.step_model import (
    STRAGGLER_PHASES,
    SimulationParameterError,
    StepModel,
    Straggler,
)
from hpcscope.analysis.simulate.stepsim import MAX_GPUS
from hpcscope.model.errors import InputError
from hpcscope.model.nccl_latency import NcclLatencies, Protocol
from hpcscope.model.topology import Topology

DEFAULT_GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
#: Default model: 635 M parameters, whose bf16 gradient (1.27 GB) takes about 6 ms to
#: AllReduce on 8 H100 over NVLink, the AllReduce of the reference's 42 ms step.
DEFAULT_MODEL_PARAMETERS = 635e6
#: Most GPU-steps one web request may simulate (16,384 GPUs x 1,000 steps fits).
MAX_REQUEST_CELLS = 20_000_000
#: One MoE layer's all-to-all per rank in DeepEP's benchmark setting, which follows
#: DeepSeek-V3's pretraining (DeepEP README: 4,096 tokens per batch, hidden 7,168, top-8
#: experts, FP8 dispatch and BF16 combine): 4,096 x 7,168 x 8 x (1 + 2) bytes.
DEEPEP_LAYER_ALLTOALL_BYTES = 4096 * 7168 * 8 * (1 + 2)
#: MoE layers the player splits the illustrative step's forward and backward into.
DEFAULT_PLAYER_MOE_LAYERS = 4

StragglerPhase = Literal["data_load", "forward", "backward", "other", "optimizer"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
assert set(STRAGGLER_PHASES) == set(StragglerPhase.__args__)  # type: ignore[attr-defined]
assert set(PRECISION_BYTES) == set(Precision.__args__)  # type: ignore[attr-defined]


class SimulationInputError(InputError, ValueError):
    """A bad parameter, named as the API names it (``field``), with a message for a person."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    data_load_seconds: float = Field(default=0.002, ge=0, allow_inf_nan=False)
    forward_seconds: float = Field(default=0.010, ge=0, allow_inf_nan=False)
    backward_seconds: float = Field(default=0.020, ge=0, allow_inf_nan=False)
    other_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    optimizer_seconds: float = Field(default=0.004, ge=0, allow_inf_nan=False)
    jitter_cv: float = Field(default=0.05, ge=0, le=1, allow_inf_nan=False)
    jitter_distribution: Literal["lognormal", "normal"] = "lognormal"
    straggler_phase: StragglerPhase = "backward"
    straggler_factor: float = Field(default=2.0, ge=1, allow_inf_nan=False)
    model_parameters: float = Field(default=DEFAULT_MODEL_PARAMETERS, gt=0, allow_inf_nan=False)
    precision: Precision = "bf16"
    allreduce_protocol: Protocol = "Simple"
    bucket_bytes: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    nic_bytes_per_second: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    intra_bytes_per_second: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    def buckets(self) -> int:
        if self.bucket_bytes is None:
            return 1
        total = gradient_bytes(self.model_parameters, self.precision)
        return max(1, -(-int(total) // int(self.bucket_bytes)))


class SimulationRequest(_Params):
    """Parameters of ``hpcscope simulate`` and ``GET /api/simulate`` (units in the names)."""

    gpus: list[int] = Field(
        default_factory=lambda: list(DEFAULT_GPU_COUNTS), min_length=1, max_length=64
    )
    steps: int = Field(default=2000, ge=1, le=1_000_000)
    straggler_gpus: list[int] = Field(default_factory=list, max_length=1024)
    hiccup_probability: float = Field(default=0.001, ge=0, le=1, allow_inf_nan=False)
    hiccup_seconds: float = Field(default=0.020, ge=0, allow_inf_nan=False)
    gc_interval_steps: int = Field(default=0, ge=0)
    gc_pause_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    gc_synchronized: bool = False
    allreduce_algorithm: AllReduceAlgorithm = "two-level"
    allreduce_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu_hour_price: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    expert_parallel_ranks: int = Field(default=1, ge=1, le=MAX_GPUS)
    alltoall_bytes: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    moe_layers: int = Field(default=1, ge=1, le=4096)
    alltoall_overlap: bool = True
    pipeline_stages: int = Field(default=1, ge=1, le=4096)
    microbatches: int = Field(default=1, ge=1, le=1_000_000)
    virtual_stages: int = Field(default=1, ge=1, le=4096)

    @field_validator("gpus", "straggler_gpus", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """Accept ``"8,64,1024"`` as well as a list (query strings and CLI flags)."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            out: list[object] = []
            for item in value:
                if isinstance(item, str):
                    out.extend(part.strip() for part in item.split(",") if part.strip())
                else:
                    out.append(item)
            return out
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_counts(cls, value: list[int]) -> list[int]:
        for count in value:
            if not 1 <= count <= MAX_GPUS:
                raise ValueError(f"GPU counts must be between 1 and {MAX_GPUS:,} (got {count})")
        return value

    @field_validator("straggler_gpus")
    @classmethod
    def _gpu_indices(cls, value: list[int]) -> list[int]:
        for index in value:
            if index < 0:
                raise ValueError(f"GPU indices start at 0 (got {index})")
        return value

    def step_model(self) -> StepModel:
        return StepModel(
            data_load_seconds=self.data_load_seconds,
            forward_seconds=self.forward_seconds,
            backward_seconds=self.backward_seconds,
            other_seconds=self.other_seconds,
            optimizer_seconds=self.optimizer_seconds,
            jitter_cv=self.jitter_cv,
            jitter_distribution=self.jitter_distribution,
            stragglers=tuple(
                Straggler(gpu, self.straggler_phase, self.straggler_factor)
                for gpu in sorted(set(self.straggler_gpus))
            ),
            hiccup_probability=self.hiccup_probability,
            hiccup_seconds=self.hiccup_seconds,
            gc_interval_steps=self.gc_interval_steps,
            gc_pause_seconds=self.gc_pause_seconds,
            gc_synchronized=self.gc_synchronized,
        )


class StepRequest(_Params):
    """Parameters of the step player (``GET /api/step``): one step of the whole cluster."""

    straggler_gpu: int = Field(default=2, ge=0)
    straggler_factor: float = Field(default=2.0, ge=1, le=20, allow_inf_nan=False)
    jitter_cv: float = Field(default=0.01, ge=0, le=1, allow_inf_nan=False)
    allreduce_algorithm: AllReduceAlgorithm = "ring"


class ExpertStepRequest(StepRequest):
    """Parameters of the step player's expert mode (``GET /api/step/expert``): the step's
    forward and backward split into MoE layers, each with an all-to-all (dispatch and combine)
    of ``alltoall_bytes`` per rank among ``expert_parallel_ranks`` GPUs (default: all)."""

    moe_layers: int = Field(default=DEFAULT_PLAYER_MOE_LAYERS, ge=1, le=64)
    alltoall_bytes: float = Field(
        default=float(DEEPEP_LAYER_ALLTOALL_BYTES), ge=0, allow_inf_nan=False
    )
    expert_parallel_ranks: int | None = Field(default=None, ge=1)
    alltoall_overlap: bool = True


def parse_request(model: type[_Params], values: Mapping[str, object]) -> Any:
    """Validate ``values`` into ``model``; the first problem as :class:`SimulationInputError`."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(request)"
        raise SimulationInputError(field, first["msg"].removeprefix("Value error, ")) from None


@contextmanager
def model_input_errors() -> Iterator[None]:
    """A parameter the model rejects becomes an input error naming the field (CLI exit 2,
    API 422)."""
    try:
        yield
    except SimulationParameterError as exc:
        raise SimulationInputError(exc.field, exc.message) from None


def fabric_for(topology: Topology, request: _Params) -> Fabric:
    """The fabric of ``topology``, with the request's NIC and NVLink rate overrides."""
    try:
        return Fabric.from_topology(
            topology,
            nic_bytes_per_second=request.nic_bytes_per_second,
            intra_bytes_per_second=request.intra_bytes_per_second,
        )
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None


def allreduce_costs(
    counts: list[int],
    request: _Params,
    algorithm: AllReduceAlgorithm,
    fabric: Fabric,
    latencies: NcclLatencies,
    *,
    message_bytes: float | None = None,
) -> dict[int, AllReduceCost]:
    """The modelled AllReduce at each of ``counts`` GPUs, of the request's gradient (or of
    ``message_bytes`` when given), with the request's protocol and buckets."""
    size = (
        message_bytes
        if message_bytes is not None
        else gradient_bytes(request.model_parameters, request.precision)
    )
    try:
        return {
            n: allreduce_cost(
                size,
                n,
                fabric,
                latencies,
                algorithm=algorithm,
                protocol=request.allreduce_protocol,
                buckets=request.buckets(),
            )
            for n in counts
        }
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None
