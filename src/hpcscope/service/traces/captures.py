"""Collecting the golden path's trace captures: per-job spools in, per-window analyses out.

The ranks of a captured job write, per capture window, a Kineto trace and a meta file into
``<capture_spool_dir>/<job>/`` (:mod:`hpcscope.model.capture`). Each collector cycle
(:meth:`CaptureSpool.collect_once`, an ``after_cycle`` hook of the collector):

1. new meta files are read; each rank's trace is parsed once and reduced to its per-rank
   summary (:mod:`hpcscope.analysis.traces.rank_summary`), which is all that is kept of it;
2. each rank's claim (job, node, GPU) is checked against the platform's allocations at the
   window's time (the prolog's hpc_job mapping and Slurm's records in the store): the job
   itself is untrusted. The window goes to the job the platform places its ranks on;
3. a window is analysed when every rank of its world size is in, or ``grace_seconds`` after
   its first rank arrived (a rank that died, a world larger than the job said), by merging the
   summaries with the same cross-rank analysis as ``hpcscope traces merge`` (phases per rank
   and step, stragglers, What-if); a window is analysed again when a late rank arrives (for
   :data:`RETAIN_SECONDS`; a complete window's summaries are dropped once it is stored);
4. the result is upserted into ``trace_captures`` (one row per job and window).

The NCCL debug logs and flight-recorder dumps the job wrote beside them are listed with the
window (the NCCL page reads them); their content is not part of the phase answer.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hpcscope.analysis.traces.rank_summary import (
    decode_summary,
    encode_summary,
    summarize,
    to_timeline,
)
from hpcscope.model.capture import (
    FLIGHT_RECORDER_PREFIX,
    META_PATTERN,
    NCCL_LOG_PATTERN,
    CaptureMeta,
    StoredCapture,
)
from hpcscope.model.errors import SourceError
from hpcscope.model.timeutil import from_epoch_seconds, parse_iso_utc, utcnow
from hpcscope.service.traces.comm_report import bundled_table
from hpcscope.service.traces.document import CapturePayloadJson
from hpcscope.service.traces.inputs import TraceInput, parse_ranks
from hpcscope.service.traces.pipeline import analyze_timelines, to_json
from hpcscope.store import slurm as slurm_store
from hpcscope.store.captures import sampled_job, upsert_capture

if TYPE_CHECKING:
    from hpcscope.store import Store

log = logging.getLogger(__name__)

#: Seconds after a window's first rank after which it is analysed with the ranks that came.
DEFAULT_GRACE_SECONDS = 30.0
#: Seconds an incomplete window's summaries are kept in memory waiting for late ranks.
RETAIN_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Placed:
    """Where the platform says a rank ran: the job holding its claimed node and GPU."""

    job_id: str | None
    node: str
    gpu: int | None


@dataclass
class _Window:
    claimed_job: str
    window: int
    first_seen: float
    metas: dict[int, CaptureMeta] = field(default_factory=dict)
    summaries: dict[int, bytes] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    analysed_ranks: int = 0
    closed: bool = False  # every rank analysed: its summaries are dropped, nothing more comes


@dataclass
class CaptureCycle:
    """What one pass over the spool did."""

    ranks_read: int = 0
    windows_analysed: int = 0
    errors: list[str] = field(default_factory=list)


class CaptureSpool:
    """Reads a spool root of per-job capture directories into ``trace_captures``.

    Args:
        store: allocations are read from it, analyses written to it.
        root: the spool root (need not exist yet).
        grace_seconds: analyse an incomplete window this long after its first rank.
        clock: Unix seconds (tests pass a fake).
        placement: (node, gpu, time) -> the platform's job; default: the store's allocations.
        threshold: straggler score threshold (as ``hpcscope traces analyze``).
    """

    def __init__(
        self,
        store: Store,
        root: Path,
        *,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        clock: Callable[[], float] = time.time,
        placement: Callable[[str, int | None, datetime], str | None] | None = None,
        threshold: float = 0.75,
    ) -> None:
        self.store = store
        self.root = root
        self.grace_seconds = grace_seconds
        self._clock = clock
        self.placement = placement or self._placement_from_store
        self.threshold = threshold
        self._seen: set[Path] = set()
        self._windows: dict[tuple[str, int], _Window] = {}

    # ------------------------------------------------------------------ one cycle

    def collect_once(self) -> CaptureCycle:
        """Read new ranks, analyse the windows that are ready, store them."""
        cycle = CaptureCycle()
        try:
            job_dirs = sorted(p for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return cycle
        for job_dir in job_dirs:
            for meta_path in sorted(job_dir.iterdir()):
                match = META_PATTERN.match(meta_path.name)
                if match is None or meta_path in self._seen:
                    continue
                self._seen.add(meta_path)
                key = (job_dir.name, int(match.group(2)))
                window = self._windows.get(key)
                if window is None:
                    window = self._windows[key] = _Window(job_dir.name, key[1], self._clock())
                if window.closed:  # a rank twice, or after the window was given up
                    cycle.errors.append(f"{meta_path}: window {key[1]} already analysed")
                    continue
                if self._read_rank(window, meta_path, cycle):
                    cycle.ranks_read += 1
        now = self._clock()
        for _, window in sorted(self._windows.items()):
            if not window.closed and now - window.first_seen > RETAIN_SECONDS:
                window.closed, window.summaries = True, {}  # late ranks are not waited for
            if window.closed or len(window.summaries) <= window.analysed_ranks:
                continue
            world = max((m.world_size for m in window.metas.values()), default=0)
            complete = len(window.summaries) >= world
            if complete or now - window.first_seen >= self.grace_seconds:
                try:
                    self._analyse(window, complete=complete)
                except SourceError as exc:
                    cycle.errors.append(exc.describe())
                    window.analysed_ranks = len(window.summaries)
                    continue
                cycle.windows_analysed += 1
                if complete:  # the summaries are not needed again
                    window.closed, window.summaries = True, {}
        return cycle

    def _read_rank(self, window: _Window, meta_path: Path, cycle: CaptureCycle) -> bool:
        try:
            meta = CaptureMeta.from_json(
                meta_path.read_text(encoding="utf-8"), source=str(meta_path)
            )
        except (OSError, ValueError) as exc:
            message = f"not a capture meta file: {exc}"
            cycle.errors.append(message)
            log.warning("%s", message)
            return False
        trace = meta_path.parent / Path(meta.trace).name  # never a path outside the job's dir
        try:
            (timeline,) = parse_ranks([TraceInput(str(trace))], workers=1, classes=bundled_table())
        except (SourceError, ValueError) as exc:
            message = exc.describe() if isinstance(exc, SourceError) else f"{trace}: {exc}"
            cycle.errors.append(message)
            window.errors.append(message)
            log.warning("capture: %s", message)
            return False
        # the meta's rank is the launcher's; the trace's (distributedInfo) is what torch said
        window.metas[timeline.rank] = meta
        window.summaries[timeline.rank] = encode_summary(summarize(timeline))
        window.sources[timeline.rank] = str(trace)
        return True

    # ------------------------------------------------------------------ attribution

    def _placement_from_store(self, node: str, gpu: int | None, at: datetime) -> str | None:
        """The job holding (node, GPU) at ``at`` in the allocations (the prolog's mapping files
        and Slurm's records), else the job its GPU samples were attributed to then."""
        rows = slurm_store.allocations_between(self.store, at, at).to_pylist()
        for row in rows:
            if row["node"] == node and (gpu is None or row["gpu"] == gpu):
                return str(row["job_id"])
        return sampled_job(self.store, node, gpu, at)

    def _place(self, window: _Window) -> tuple[dict[int, Placed], str, str, list[str]]:
        """Each rank's placement, the job of the window, the attribution and notes."""
        claimed = slurm_store.job_id_for_labels(self.store, [window.claimed_job]).get(
            window.claimed_job, window.claimed_job
        )
        placed: dict[int, Placed] = {}
        notes: list[str] = []
        for rank, meta in sorted(window.metas.items()):
            at = from_epoch_seconds((meta.start_ts + meta.end_ts) / 2)
            job = self.placement(meta.node, meta.gpu, at)
            placed[rank] = Placed(job, meta.node, meta.gpu)
            where = f"{meta.node} GPU {meta.gpu}" if meta.gpu is not None else meta.node
            if job is None:
                notes.append(f"rank {rank} claims {where}: no job of the platform holds it")
            elif job != claimed:
                notes.append(f"rank {rank} claims job {claimed} on {where}: the platform "
                             f"maps it to job {job}")  # fmt: skip
        jobs = [p.job_id for p in placed.values() if p.job_id is not None]
        if not jobs:
            return placed, claimed, "unverified", notes
        job = max(sorted(set(jobs)), key=jobs.count)
        if job != claimed or len(set(jobs)) > 1:
            attribution = "mismatch"
        elif len(jobs) == len(placed):
            attribution = "verified"
        else:
            attribution = "partly verified"
        return placed, job, attribution, notes

    # ------------------------------------------------------------------ analysis

    def _analyse(self, window: _Window, *, complete: bool) -> None:
        timelines = [
            to_timeline(decode_summary(window.summaries[r], source=window.sources[r]),
                        source=window.sources[r])
            for r in sorted(window.summaries)
        ]  # fmt: skip
        world = max(m.world_size for m in window.metas.values())
        result = analyze_timelines(timelines, threshold=self.threshold, world_size=world)
        document = to_json(result)
        placed, job_id, attribution, notes = self._place(window)
        for source in document["sources"]:
            where = placed.get(int(source["rank"]))
            if where is not None and where.job_id == job_id:  # only verified placements
                source["host"] = where.node
                source["gpu_index"] = where.gpu
        if not complete:
            missing = sorted(set(range(world)) - set(window.summaries))
            notes.append(
                f"window analysed without rank(s) {', '.join(map(str, missing))} "
                f"({len(window.summaries)} of {world} in after {self.grace_seconds:g} s)"
            )
        notes.extend(window.errors)
        job_dir = self.root / window.claimed_job
        payload: CapturePayloadJson = {
            "analysis": document,
            "placement": {
                str(rank): {"node": p.node, "gpu": p.gpu, "job_id": p.job_id}
                for rank, p in placed.items()
            },
            "nccl_logs": sorted(p.name for p in job_dir.glob(NCCL_LOG_PATTERN)),
            "flight_recorder": sorted(p.name for p in job_dir.glob(f"{FLIGHT_RECORDER_PREFIX}*")),
        }
        upsert_capture(self.store, _row(window, job_id, attribution, notes, placed, payload))
        window.analysed_ranks = len(window.summaries)
        log.debug("capture: job %s window %d analysed (%d ranks, %s)", job_id,
                  window.window, len(window.summaries), attribution)  # fmt: skip


def _row(
    window: _Window,
    job_id: str,
    attribution: str,
    notes: list[str],
    placed: dict[int, Placed],
    payload: CapturePayloadJson,
) -> StoredCapture:
    document = payload["analysis"]
    stragglers = sorted(document["stragglers"], key=lambda s: -(s["excess_seconds_per_step"] or 0))
    top = stragglers[0] if stragglers else None
    where = placed.get(int(top["rank"])) if top is not None else None
    what = document["what_if"]
    gain = None
    if what["actual_step_seconds"] is not None and what["fixed_worst_step_seconds"] is not None:
        gain = max(0.0, what["actual_step_seconds"] - what["fixed_worst_step_seconds"])
    span = document.get("window")
    metas = window.metas.values()
    return StoredCapture(
        job_id=job_id,
        capture_window=window.window,
        claimed_job_id=window.claimed_job,
        updated=utcnow(),
        window_start=parse_iso_utc(span["start_utc"]) if span
        else from_epoch_seconds(min(m.start_ts for m in metas)),
        window_end=parse_iso_utc(span["end_utc"]) if span
        else from_epoch_seconds(max(m.end_ts for m in metas)),
        ranks=len(document["ranks"]),
        world_size=max(m.world_size for m in metas),
        steps=int(document["steps"]),
        nodes=tuple(sorted({p.node for p in placed.values()})),
        attribution=attribution,
        straggler_rank=int(top["rank"]) if top is not None else None,
        straggler_phase=top["phase"] if top is not None else None,
        straggler_node=where.node if where is not None else None,
        straggler_gpu=where.gpu if where is not None else None,
        delay_seconds_per_step=top["excess_seconds_per_step"] if top is not None else None,
        what_if_gain_seconds_per_step=gain,
        notes=tuple(notes),
        result_json=json.dumps(payload),
    )  # fmt: skip
