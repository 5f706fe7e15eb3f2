"""Evidence for a straggler's root cause: the numbers behind a data, network, hardware or
software hint, from the traces themselves and, when hpcscope holds it, the GPU telemetry of the
job's window.

Each straggler gets a list of :class:`Evidence` items; ``supports`` is True for an item that
points at the cause and False for one that was checked and rules a cause out (a user chasing a
straggler needs both: "not thermal" saves a trip to the data centre). Rules (all compare the
straggler with the median of its peers, the other ranks, over the analysed steps):

* **data** (trace): its data-load seconds per step exceed its peers' by more than half of its
  excess, or data load is the phase that makes it slow.
* **network** (trace): its communication (collective time after the last rank arrived) exceeds
  its peers' by more than half of its excess while no compute phase (data, forward, backward,
  optimizer) of any rank exceeds its peers' by :data:`MIN_EXCESS_RATIO` of the step: a slow
  collective with no compute straggler.
* **hardware** (telemetry of the rank's GPU against the GPUs of its peers): clock-event
  (throttle) reasons with a slowdown bit (SW power cap 0x4, HW slowdown 0x8, SW thermal 0x20,
  HW thermal 0x40, HW power brake 0x80) for a larger share of the window than on its peers;
  an SM clock below :data:`CLOCK_RATIO` of its peers'; a maximum temperature
  :data:`HOTTER_CELSIUS` above its peers'; a non-zero last Xid.
* **software** (trace): Python garbage collection (``Python GC`` events) or CPU launch gaps
  (GPU idle waiting for the CPU to launch the next kernel) exceed its peers' by more than a
  quarter of its excess, or ``other`` is the phase that makes it slow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import median as median_of
from hpcscope.analysis.traces.phases import PhaseTable
from hpcscope.analysis.traces.rank_timeline import PHASES, RankTimeline
from hpcscope.analysis.traces.stragglers import Straggler, StragglerReport
from hpcscope.model.xid import describe_xid

F64 = npt.NDArray[np.float64]

THROTTLE_BITS = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
THERMAL_MASK = 0x20 | 0x40
SLOWDOWN_MASK = sum(THROTTLE_BITS)
#: An SM clock below this share of the peers' median is a hardware hint.
CLOCK_RATIO = 0.95
#: A maximum temperature this much above the peers' median is a hardware hint.
HOTTER_CELSIUS = 5.0
#: Slowdown share (of the window) above the peers' by this much is a hardware hint.
SLOWDOWN_SHARE_MARGIN = 0.10
#: A compute phase this share of the step above its peers makes a compute straggler.
MIN_EXCESS_RATIO = 0.02
COMPUTE_PHASES = ("data_load", "forward", "backward", "optimizer")


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """One rank's GPU over the analysed window, summarised from ``gpu_samples``.

    Attributes:
        node / gpu: the physical GPU the rank ran on (see ``docs/traces.md``: mapping).
        sm_clock_hertz: time-weighted mean SM clock.
        max_temperature_celsius: highest GPU temperature.
        throttle_reasons: OR of the clock-event reason bitmasks of all samples.
        slowdown_share: share of the window with a slowdown reason set.
        xid: last non-zero Xid, None when there was none.
        samples: how many samples the summary rests on.
        mapping: how the rank was mapped to this GPU.
    """

    node: str
    gpu: int
    sm_clock_hertz: float | None
    max_temperature_celsius: float | None
    throttle_reasons: int
    slowdown_share: float | None
    xid: int | None
    samples: int
    mapping: str = ""


class EvidenceJson(TypedDict):
    """An :class:`Evidence` in a JSON document."""

    kind: str
    supports: bool
    summary: str
    figures: dict[str, float | int | str | None]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One finding about a straggler's cause.

    Attributes:
        kind: ``data``, ``network``, ``hardware`` or ``software``.
        supports: True when it points at this cause, False when it rules it out.
        summary: one sentence with the numbers.
        figures: the numbers (seconds per step, hertz, celsius, bitmasks, codes).
    """

    kind: str
    supports: bool
    summary: str
    figures: dict[str, float | int | str | None] = field(default_factory=dict)

    def to_dict(self) -> EvidenceJson:
        return {
            "kind": self.kind,
            "supports": self.supports,
            "summary": self.summary,
            "figures": {
                k: round(v, 6) if isinstance(v, float) else v for k, v in self.figures.items()
            },
        }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def _aligned(per_step: F64, steps: Sequence[int], table_steps: Sequence[int]) -> F64:
    """A per-step series of a timeline on the table's (common) steps."""
    index = {number: i for i, number in enumerate(steps)}
    if per_step.shape[0] != len(steps):
        return np.zeros(len(table_steps))
    return np.array([per_step[index[n]] for n in table_steps if n in index], dtype=np.float64)


def straggler_evidence(
    table: PhaseTable,
    report: StragglerReport,
    *,
    timelines: Sequence[RankTimeline] = (),
) -> dict[int, tuple[Evidence, ...]]:
    """Evidence from the traces (data, network, software) for each straggler of ``report``.

    Args:
        table: the phase table the report was computed from.
        report: the straggler report.
        timelines: the ranks' timelines (GC and launch gaps); optional.

    Returns:
        ``{rank: evidence items}`` for every straggler (supporting items first).
    """
    out: dict[int, tuple[Evidence, ...]] = {}
    if not report.stragglers or len(table.ranks) < 2:
        return out
    median = median_of(table.seconds, axis=1)  # [rank, phase]
    step = float(median_of(table.step_seconds))
    by_rank = {tl.rank: tl for tl in timelines}
    compute_excess = _compute_excess(median)
    software = (
        {attribute: _series_medians(table, by_rank, attribute) for attribute, _, _ in _SOFTWARE}
        if all(rank in by_rank for rank in table.ranks)
        else None
    )
    for straggler in report.stragglers:
        r = table.ranks.index(straggler.rank)
        peers = [i for i in range(len(table.ranks)) if i != r]
        items = [
            _data(straggler, median, r, peers),
            _network(straggler, median, r, peers, compute_excess, step),
            *_software(straggler, table, software, r, peers),
        ]
        items.sort(key=lambda e: not e.supports)
        out[straggler.rank] = tuple(items)
    return out


def hardware_evidence(
    stragglers: Sequence[int], ranks: Sequence[int], gpus: Mapping[int, GpuTelemetry]
) -> dict[int, tuple[Evidence, ...]]:
    """Evidence from GPU telemetry: each straggler's GPU against its peers' GPUs.

    Args:
        stragglers: the straggler ranks.
        ranks: every analysed rank (the peers are the others).
        gpus: telemetry of each rank's GPU over the analysed window (ranks without a mapped
            GPU or without samples are absent).

    Returns:
        ``{rank: evidence items}`` for the stragglers whose GPU and at least one peer's GPU
        have telemetry.
    """
    out: dict[int, tuple[Evidence, ...]] = {}
    for rank in stragglers:
        items = _hardware(rank, gpus, [r for r in ranks if r != rank])
        if items:
            items.sort(key=lambda e: not e.supports)
            out[rank] = tuple(items)
    return out


def _phase(median: F64, r: int, peers: list[int], name: str) -> tuple[float, float]:
    i = PHASES.index(name)
    return float(median[r, i]), float(median_of(median[peers, i]))


def _compute_excess(median: F64) -> float:
    """Largest excess of any rank's compute phase over the median of the other ranks."""
    worst = 0.0
    n = median.shape[0]
    for name in COMPUTE_PHASES:
        i = PHASES.index(name)
        for r in range(n):
            others = np.delete(median[:, i], r)
            worst = max(worst, float(median[r, i] - median_of(others)))
    return worst


def _data(s: Straggler, median: F64, r: int, peers: list[int]) -> Evidence:
    own, theirs = _phase(median, r, peers, "data_load")
    figures: dict[str, float | int | str | None] = {
        "data_load_seconds_per_step": own,
        "peers_data_load_seconds_per_step": theirs,
    }
    if s.phase == "data_load" or own - theirs > s.excess_seconds_per_step / 2:
        return Evidence(
            "data",
            True,
            f"data loading takes {_ms(own)} per step on rank {s.rank} against {_ms(theirs)} on "
            "its peers (DataLoader __next__ and data annotations in the trace): its input "
            "pipeline (workers, storage reads, preprocessing) is what the others wait for",
            figures,
        )
    return Evidence(
        "data",
        False,
        f"data loading is not it: {_ms(own)} per step against {_ms(theirs)} on its peers",
        figures,
    )


def _network(
    s: Straggler, median: F64, r: int, peers: list[int], compute_excess: float, step: float
) -> Evidence:
    own, theirs = _phase(median, r, peers, "communication")
    figures: dict[str, float | int | str | None] = {
        "communication_seconds_per_step": own,
        "peers_communication_seconds_per_step": theirs,
        "largest_compute_excess_seconds_per_step": compute_excess,
    }
    no_compute_straggler = compute_excess < MIN_EXCESS_RATIO * step
    if s.phase == "communication" or (
        own - theirs > s.excess_seconds_per_step / 2 and no_compute_straggler
    ):
        where = (
            "and no rank computes slower than its peers"
            if no_compute_straggler
            else f"(the largest compute excess of any rank is {_ms(compute_excess)})"
        )
        return Evidence(
            "network",
            True,
            f"its collectives transfer for {_ms(own)} per step after the last rank arrived, "
            f"against {_ms(theirs)} on its peers, {where}: a slow link, NIC or switch port "
            "(check InfiniBand error counters and the NCCL topology)",
            figures,
        )
    return Evidence(
        "network",
        False,
        f"the network is not it: its collectives transfer for {_ms(own)} per step against "
        f"{_ms(theirs)} on its peers",
        figures,
    )


#: Software causes read from every rank's per-step series: attribute, label, what it means.
_SOFTWARE = (
    (
        "gc_seconds",
        "Python garbage collection",
        "GC pauses (gc.freeze() after start-up, or gc.disable() with periodic collections "
        "on every rank at the same step)",
    ),
    (
        "launch_gap_seconds",
        "GPU idle waiting for the CPU to launch the next kernel",
        "a CPU-bound rank (Python overhead, host synchronisations, a busy or slower CPU; "
        "CUDA graphs remove launch gaps)",
    ),
)


def _series_medians(
    table: PhaseTable, timelines: Mapping[int, RankTimeline], attribute: str
) -> F64 | None:
    """Each rank's median per-step ``attribute`` on the table's steps, in ``table.ranks``
    order; None when no rank records it. Computed once per analysis, not once per straggler
    (a capture of hundreds of ranks can have tens of stragglers)."""
    series = [
        _aligned(getattr(timelines[rank], attribute), timelines[rank].steps, table.steps)
        for rank in table.ranks
    ]
    if not any(v.any() for v in series):
        return None
    return np.array([float(median_of(v)) for v in series])


def _software(
    s: Straggler,
    table: PhaseTable,
    software: Mapping[str, F64 | None] | None,
    r: int,
    peers: list[int],
) -> list[Evidence]:
    items: list[Evidence] = []
    if software is None:  # some rank has no timeline
        return items
    for attribute, label, meaning in _SOFTWARE:
        medians = software[attribute]
        if medians is None:
            continue  # the traces do not record it (no GC events, CPU-only traces)
        own = float(medians[r])
        theirs = float(median_of(medians[peers]))
        key = attribute.removesuffix("_seconds")
        figures: dict[str, float | int | str | None] = {
            f"{key}_seconds_per_step": own,
            f"peers_{key}_seconds_per_step": theirs,
        }
        if own - theirs > s.excess_seconds_per_step / 4:
            items.append(
                Evidence(
                    "software",
                    True,
                    f"{label}: {_ms(own)} per step on rank {s.rank} against {_ms(theirs)} on its "
                    f"peers: {meaning}",
                    figures,
                )
            )
        else:
            items.append(
                Evidence(
                    "software",
                    False,
                    f"{label} is not it: {_ms(own)} per step against {_ms(theirs)} on its peers",
                    figures,
                )
            )
    if s.phase == "other" and not any(e.supports for e in items):
        own = float(median_of(table.seconds[r, :, PHASES.index("other")]))
        theirs = float(median_of(median_of(table.seconds[peers, :, PHASES.index("other")], 1)))
        items.append(
            Evidence(
                "software",
                True,
                f"time outside every recognised phase: {_ms(own)} per step against {_ms(theirs)} "
                "on its peers (logging, checkpointing, host work between steps)",
                {"other_seconds_per_step": own, "peers_other_seconds_per_step": theirs},
            )
        )
    return items


def _bits(mask: int) -> str:
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    return ", ".join(names) if names else "none"


def _hardware(rank: int, gpus: Mapping[int, GpuTelemetry], peer_ranks: list[int]) -> list[Evidence]:
    own = gpus.get(rank)
    peers = [gpus[p] for p in peer_ranks if p in gpus]
    if own is None or not peers:
        return []
    where = f"node {own.node} GPU {own.gpu}"
    items: list[Evidence] = []
    peer_share = float(median_of([p.slowdown_share or 0.0 for p in peers]))
    own_share = own.slowdown_share or 0.0
    slowed = own.throttle_reasons & SLOWDOWN_MASK
    peers_throttled = sum(1 for p in peers if p.throttle_reasons & slowed)
    base: dict[str, float | int | str | None] = {"node": own.node, "gpu": own.gpu}
    if slowed and own_share > peer_share + SLOWDOWN_SHARE_MARGIN:
        thermal = " (thermal)" if slowed & THERMAL_MASK else ""
        items.append(
            Evidence(
                "hardware",
                True,
                f"clock throttling{thermal} on {where}: {_bits(slowed)} "
                f"(clock-event reasons 0x{slowed:x}) for {own_share:.0%} of the window, against "
                f"{peer_share:.0%} on its peers ({peers_throttled} of {len(peers)} peer GPUs "
                "with the same reasons)",
                {
                    **base,
                    "throttle_reasons": own.throttle_reasons,
                    "slowdown_share": own_share,
                    "peers_slowdown_share": peer_share,
                },
            )
        )
    peer_clocks = [p.sm_clock_hertz for p in peers if p.sm_clock_hertz]
    if own.sm_clock_hertz and peer_clocks:
        ratio = own.sm_clock_hertz / float(median_of(peer_clocks))
        if ratio < CLOCK_RATIO:
            items.append(
                Evidence(
                    "hardware",
                    True,
                    f"{where} ran at {own.sm_clock_hertz / 1e9:.2f} GHz SM clock against "
                    f"{float(median_of(peer_clocks)) / 1e9:.2f} GHz on its peers "
                    f"({(1 - ratio):.0%} slower)",
                    {
                        **base,
                        "sm_clock_hertz": own.sm_clock_hertz,
                        "peers_sm_clock_hertz": float(median_of(peer_clocks)),
                    },
                )
            )
    peer_temps = [p.max_temperature_celsius for p in peers if p.max_temperature_celsius]
    if own.max_temperature_celsius and peer_temps:
        hotter = own.max_temperature_celsius - float(median_of(peer_temps))
        if hotter >= HOTTER_CELSIUS:
            items.append(
                Evidence(
                    "hardware",
                    True,
                    f"{where} reached {own.max_temperature_celsius:.0f} °C against "
                    f"{float(median_of(peer_temps)):.0f} °C on its peers (+{hotter:.0f} °C): "
                    "check its cooling (fans, airflow, a blocked heatsink)",
                    {
                        **base,
                        "max_temperature_celsius": own.max_temperature_celsius,
                        "peers_max_temperature_celsius": float(median_of(peer_temps)),
                    },
                )
            )
    if own.xid:
        items.append(
            Evidence(
                "hardware",
                True,
                f"{where} reported Xid {own.xid} ({describe_xid(own.xid)}) in the window",
                {**base, "xid": own.xid},
            )
        )
    if not items:
        items.append(
            Evidence(
                "hardware",
                False,
                f"the GPU is not it: {where} shows no slowdown reason, no Xid, SM clock "
                f"{(own.sm_clock_hertz or 0) / 1e9:.2f} GHz and at most "
                f"{own.max_temperature_celsius or 0:.0f} °C, like its peers "
                f"({own.samples} samples)",
                {
                    **base,
                    "sm_clock_hertz": own.sm_clock_hertz,
                    "max_temperature_celsius": own.max_temperature_celsius,
                    "throttle_reasons": own.throttle_reasons,
                },
            )
        )
    return items
