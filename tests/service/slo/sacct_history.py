"""A seeded month of ``sacct --parsable2`` output (XDMoD's 26 fields, ``TZ=UTC``) for SLO tests.

The lines are what ``TZ=UTC sacct --allusers --parsable2 --noheader --allocations --format
<XDMOD_FIELDS>`` prints (the field order and value shapes of the committed xdmod fixture
``tests/fixtures/slurm/sacct_parsable2_xdmod/accounting-logs.log``): ``Unknown`` times of jobs
that have not started or ended, ``None assigned`` node lists of pending jobs, ``CANCELLED by
<uid>``, ``<return>:<signal>`` exit codes. A few FAILED jobs also get a kept summary naming an
Xid (``node_failure_xid``), as the summaries capability would write.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa

from hpcscope.ingest.slurm.parsable import parse_sacct_parsable2
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.store import Store
from hpcscope.store.summaries import write_summaries

NOW = datetime(2026, 10, 2, 12, 0, 0)
USERS = {"alice": "vision", "bob": "nlp", "dave": "speech", "erin": "vision"}
#: (state, exit code) drawn per ended job, with weights
ENDINGS = [
    (("COMPLETED", "0:0"), 60),
    (("FAILED", "1:0"), 10),
    (("FAILED", "2:0"), 4),
    (("OUT_OF_MEMORY", "0:125"), 3),
    (("NODE_FAIL", "0:0"), 3),
    (("PREEMPTED", "0:15"), 4),
    (("TIMEOUT", "0:1"), 5),
    (("CANCELLED by 10203", "0:15"), 6),
]


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class History:
    text: str
    xid_jobs: frozenset[str]


def _t(moment: datetime | None) -> str:
    return "Unknown" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S")


def _elapsed(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{h:02d}:{m:02d}:{s:02d}"


def sacct_history(
    *, seed: int = 14, jobs: int = 400, days: float = 10.0, now: datetime = NOW
) -> History:
    """``jobs`` job lines submitted over the ``days`` before ``now`` (some still pending or
    running then)."""
    NOW = now  # noqa: N806  (the module's NOW unless a test passes its own)
    rng = random.Random(seed)
    lines = []
    xid_jobs: set[str] = set()
    states = [e for e, _ in ENDINGS]
    weights = [w for _, w in ENDINGS]
    for n in range(jobs):
        job_id = str(5_100_000 + n)
        user = rng.choice(sorted(USERS))
        partition = rng.choice(["gpu", "gpu", "gpu", "debug"])
        qos = rng.choice(["normal", "normal", "high"])
        submit = NOW - timedelta(seconds=rng.uniform(0, days * 86400))
        # waits: most short, a tail of long ones (a busy queue)
        wait = rng.expovariate(1 / 900) if rng.random() < 0.85 else rng.uniform(3600, 6 * 3600)
        planned_start = submit + timedelta(seconds=int(wait))
        run = int(rng.uniform(120, 8 * 3600))
        start: datetime | None = planned_start
        end: datetime | None = planned_start + timedelta(seconds=run)
        state, code = rng.choices(states, weights)[0]
        nodes = f"gpu{rng.randint(1, 2):02d}"
        if planned_start > NOW:
            if rng.random() < 0.2:  # cancelled while pending
                state, code = "CANCELLED by 10203", "0:0"
                end = min(NOW, submit + timedelta(seconds=int(wait / 2)))  # before its start
                start, nodes = None, "None assigned"
            else:
                state, code, start, end, nodes = "PENDING", "0:0", None, None, "None assigned"
        elif planned_start + timedelta(seconds=run) > NOW:
            state, code, end = "RUNNING", "0:0", None
        elapsed = 0 if start is None else int(((end or NOW) - start).total_seconds())
        if state == "FAILED" and rng.random() < 0.4:
            xid_jobs.add(job_id)
        gpus = rng.choice([1, 2, 4, 8])
        fields = [
            job_id, job_id, "hpcscope", partition, qos, USERS[user], USERS[user], "5000",
            user, str(10_000 + n % 7), _t(submit), _t(submit), _t(start), _t(end),
            _elapsed(elapsed), code, state, "1", str(8 * gpus), str(8 * gpus), "64G",
            f"billing={8 * gpus},cpu={8 * gpus},gres/gpu={gpus},mem=64G,node=1",
            "" if start is None else f"billing={8 * gpus},cpu={8 * gpus},gres/gpu={gpus},node=1",
            "1-00:00:00", nodes, f"train-{n}",
        ]  # fmt: skip
        lines.append("|".join(fields))
    return History("\n".join(lines) + "\n", frozenset(xid_jobs))


def expected_cause(state: str, code: str, *, xid: bool) -> str:
    """The table of docs/slo.md, written out again."""
    ret = int(code.split(":")[0])
    if state == "COMPLETED" and ret == 0:
        return "success"
    if state == "NODE_FAIL":
        return "node_failure"
    if state == "FAILED" and xid:
        return "node_failure_xid"
    return {"PREEMPTED": "preemption", "TIMEOUT": "timeout", "CANCELLED": "cancelled"}.get(
        state, "user_error"
    )


def load_history(
    store: Store, history: History, *, now: datetime
) -> dict[str, tuple[float, float]]:
    """Parse the lines with hpcscope's parser into ``store``'s ``jobs``, and write a kept
    summary for about 70 % of the ended jobs (seeded useful / allocated GPU-seconds; the
    FAILED jobs of ``history.xid_jobs`` with cause ``node_failure_xid``).

    Returns:
        job id -> (useful, allocated) GPU-seconds of the summarised jobs.
    """
    parsed = parse_sacct_parsable2(history.text, source="sacct")
    store.upsert_jobs(parsed.snapshot.jobs).result()
    rng = random.Random(7)
    summaries: dict[str, tuple[float, float]] = {}
    rows = []
    for record in parsed.records:
        state = record.state.split(" ")[0]
        if state not in FINISHED or record.start_time is None or rng.random() < 0.3:
            continue
        if record.node_list == "None assigned":
            continue
        allocated = float(record.gpus * (record.elapsed_seconds or 0))
        useful = allocated * rng.uniform(0.1, 0.9)
        summaries[record.job_id] = (useful, allocated)
        xid = record.job_id in history.xid_jobs
        rows.append(
            {
                "job_id": record.job_id,
                "summarised_at": now,
                "user": record.user,
                "account": record.account,
                "state": state,
                "exit_cause": expected_cause(state, record.exit_code, xid=xid),
                "gpus_observed": record.gpus,
                "observed_gpu_seconds": allocated,
                "useful_gpu_seconds": useful,
                "allocated_gpu_seconds": allocated,
                "verdict": "ok",
            }
        )
    jobs = pa.Table.from_pylist(rows, schema=JOB_SUMMARY_SCHEMA)
    write_summaries(store, jobs, JOB_GPU_SUMMARY_SCHEMA.empty_table()).result()
    return summaries
