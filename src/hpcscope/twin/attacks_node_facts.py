"""The twin's scenarios for the node facts: Xid bursts (GM-4) and posture checks (SC-7, CE-5,
GM-5, DP-3), each with benign counterparts that must stay quiet.

GM-4: dcgm-exporter's ``DCGM_EXP_XID_ERRORS_COUNT{xid}`` counts each code within its window
(``--xid-count-window-size 120000``); the twin keeps the Xid times and counts those in the
last two minutes at each scrape. Posture: node_exporter serves the daily check's textfile
(:mod:`hpcscope.twin.posture`) at every scrape until the next check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hpcscope.twin.attacks import Scenario
from hpcscope.twin.posture import PATCHED, NodeCheck, posture_page
from hpcscope.twin.security_events import Proc
from hpcscope.twin.telemetry_scenery import MINUTE, allocation_rows, job_row
from hpcscope.twin.telemetry_traces import (
    SCRAPE_SECONDS,
    SECOND_NS,
    GpuState,
    compute_apps,
    dcgm_pages,
    gpus,
)

XID_WINDOW_SECONDS = 120.0
HOUR = 60 * MINUTE


def xid_times(code: int, start: float, every: float, n: int) -> list[tuple[int, float]]:
    """``n`` Xids of ``code`` every ``every`` seconds from ``start`` (seconds after t0)."""
    return [(code, start + k * every) for k in range(n)]


def window_counts(errors: Sequence[tuple[int, float]], t: float) -> tuple[tuple[int, int], ...]:
    """What the exporter's gauge shows at ``t``: per code, Xids in ``(t - window, t]``."""
    counts: dict[int, int] = {}
    for code, at in errors:
        if t - XID_WINDOW_SECONDS < at <= t:
            counts[code] = counts.get(code, 0) + 1
    return tuple(sorted(counts.items()))


def _xid_scenario(
    t0: int, s: Scenario, *, job: str, node: str, gpu: int, start: float,
    errors: Sequence[tuple[int, float]], minutes: float,
) -> None:  # fmt: skip
    """A job on all 8 GPUs of ``node`` from ``start``; ``gpu`` reports ``errors``."""

    def state(t: float, g: int) -> GpuState:
        xids = window_counts(errors, t) if g == gpu else ()
        if t < start:
            return GpuState(xid_counts=xids)
        return GpuState(util_ratio=0.95, sm_active_ratio=0.7, fb_used_mib=60000.0, job_id=job,
                        xid_counts=xids)  # fmt: skip

    s.pages = dcgm_pages(t0, node, state, duration_seconds=minutes * MINUTE)
    s.slurm_jobs = [job_row(t0, job, [node], start=start)]
    s.allocations = allocation_rows(t0, job, node, range(8), start=start)
    s.evaluate_at_ns = t0 + int(minutes * MINUTE * SECOND_NS)


def _apps(t0: int, s: Scenario, node: str, job: str, minutes: float,
          extra: Callable[[float], list[tuple[int, int, str]]] = lambda t: []) -> None:  # fmt: skip
    """NVML lists the job's python3 on every GPU (and ``extra(t)``: (gpu, pid, name)) at each
    scrape; every PID's cgroup is the job's."""
    node_gpus = gpus(node)
    uid = 1000 if job in ("4410001", "4410006") else 1001
    for g in range(8):
        s.proc.add(Proc(node, 3000 + g, uid, "/usr/bin/python3", "train.py", t0), job)
    pids: set[int] = set()
    for k in range(int(minutes * MINUTE // SCRAPE_SECONDS) + 1):
        t = k * SCRAPE_SECONDS
        ts = t0 + int(t * SECOND_NS)
        rows = [(ts, node_gpus[g].uuid, 3000 + g, "python3", 60000.0) for g in range(8)]
        for gpu, pid, name in extra(t):
            if pid not in pids:
                s.proc.add(Proc(node, pid, uid, f"/home/u/{name}", name, t0), job)
                pids.add(pid)
            rows.append((ts, node_gpus[gpu].uuid, pid, name, 900.0))
        s.compute_apps.append((node, compute_apps(rows)))


def xid_burst_new_job(t0: int) -> Scenario:
    """bob's job starts on gpu01 and, 2 minutes in, GPU 3 reports 24 Xid 31 and 6 Xid 13 in
    under 2 minutes (a new job probing memory it does not own): GM-4."""
    s = Scenario("gpu-xid-burst-new-job", benign=False, node="gpu01", job_id="4410002", gpu=3)
    errors = xid_times(31, 4 * MINUTE, 4.0, 24) + xid_times(13, 4 * MINUTE + 2, 15.0, 6)
    _xid_scenario(t0, s, job="4410002", node="gpu01", gpu=3, start=2 * MINUTE, errors=errors,
                  minutes=9)  # fmt: skip
    s.expected = {"GM-4": 1}
    s.severities = {"GM-4": "MEDIUM"}
    s.onset_ns = t0 + int(4 * MINUTE * SECOND_NS)
    return s


def xid_burst_unknown_binary(t0: int) -> Scenario:
    """alice's 2-hour-old job: an unknown binary (``gpuprobe``) appears on GPU 6 of gpu02 and
    the GPU reports 30 Xid 43 within 2 minutes: GM-4."""
    s = Scenario("gpu-xid-burst-unknown-binary", benign=False, node="gpu02", job_id="4410001",
                 gpu=6)  # fmt: skip
    errors = xid_times(43, 5 * MINUTE, 3.0, 30)
    _xid_scenario(t0, s, job="4410001", node="gpu02", gpu=6, start=-2 * HOUR, errors=errors,
                  minutes=9)  # fmt: skip
    _apps(t0, s, "gpu02", "4410001", 9,
          lambda t: [(6, 6666, "gpuprobe")] if 4 * MINUTE <= t <= 7 * MINUTE else [])  # fmt: skip
    s.expected = {"GM-4": 1}
    s.onset_ns = t0 + int(5 * MINUTE * SECOND_NS)
    return s


def benign_xid_bug_established_job(t0: int) -> Scenario:
    """A 2-hour-old training job with only its python3 on the GPUs hits an application bug:
    40 Xid 31 on GPU 2 in 2 minutes (the catalogue's "usually an application bug")."""
    s = Scenario("benign-xid-bug-established-job", benign=True, node="gpu03", gpu=2)
    errors = xid_times(31, 5 * MINUTE, 3.0, 40)
    _xid_scenario(t0, s, job="4410001", node="gpu03", gpu=2, start=-2 * HOUR, errors=errors,
                  minutes=9)  # fmt: skip
    _apps(t0, s, "gpu03", "4410001", 9)
    return s


def benign_xid_few_in_new_job(t0: int) -> Scenario:
    """A new job's first minutes with 5 Xid 13 (a bad kernel launch, retried): below the
    burst threshold."""
    s = Scenario("benign-xid-few-in-new-job", benign=True, node="gpu04", gpu=1)
    _xid_scenario(t0, s, job="4410002", node="gpu04", gpu=1, start=MINUTE,
                  errors=xid_times(13, 3 * MINUTE, 10.0, 5), minutes=6)  # fmt: skip
    return s


# ---------------------------------------------------------------------- posture


def _posture(t0: int, s: Scenario, check: NodeCheck) -> None:
    """node_exporter serves the morning check (3 h before ``t0``) at 4 scrapes."""
    written = t0 / SECOND_NS - 3 * HOUR
    s.pages = [
        (t0 + int(k * SCRAPE_SECONDS * SECOND_NS), "node", s.node,
         posture_page(check, written_at_seconds=written))
        for k in range(4)
    ]  # fmt: skip
    s.evaluate_at_ns = t0 + int(MINUTE * SECOND_NS)


def _check(t0: int, **kwargs: object) -> NodeCheck:
    return NodeCheck(checked_at_seconds=t0 / SECOND_NS - 3 * HOUR, **kwargs)  # type: ignore[arg-type]


def posture_vulnerable_torch(t0: int) -> Scenario:
    """gpu05's image still ships torch 2.5.1 (CVE-2025-32434, weights_only=True bypass): SC-7."""
    s = Scenario("posture-torch-2.5.1", benign=False, node="gpu05", job_id=None)
    _posture(t0, s, _check(t0, versions=dict(PATCHED) | {"torch": "2.5.1+cu121"}))
    s.expected = {"SC-7": 1}
    s.severities = {"SC-7": "MEDIUM"}
    return s


def posture_old_runc(t0: int) -> Scenario:
    """gpu06 runs runc 1.1.11 (Leaky Vessels, CVE-2024-21626): CE-5."""
    s = Scenario("posture-runc-1.1.11", benign=False, node="gpu06", job_id=None)
    _posture(t0, s, _check(t0, versions=dict(PATCHED) | {"runc": "1.1.11"}))
    s.expected = {"CE-5": 1}
    return s


def posture_no_gpu_reset(t0: int) -> Scenario:
    """gpu07's epilog does not reset the GPUs (the next job reads what is left): GM-5."""
    s = Scenario("posture-epilog-without-gpu-reset", benign=False, node="gpu07", job_id=None)
    _posture(t0, s, _check(t0, raised=frozenset({"epilog_without_gpu_reset"})))
    s.expected = {"GM-5": 1}
    return s


def posture_unhashed_dataset(t0: int) -> Scenario:
    """A web-crawled dataset on gpu08's mounts was built from a URL list without hashes: DP-3."""
    s = Scenario("posture-url-list-without-hashes", benign=False, node="gpu08", job_id=None)
    datasets = {"/lustre/datasets/webcrawl": ("/lustre/datasets/webcrawl/urls.tsv", False),
                "/lustre/datasets/laion-subset": ("/lustre/datasets/laion-subset/urls.parquet",
                                                  True)}  # fmt: skip
    _posture(t0, s, _check(t0, datasets=datasets))
    s.expected = {"DP-3": 1}
    return s


def benign_patched_node(t0: int) -> Scenario:
    """A patched node (fixed releases, no risky fact, hashed URL lists): quiet."""
    s = Scenario("benign-posture-patched-node", benign=True, node="gpu04", job_id=None)
    datasets = {"/lustre/datasets/laion-subset": ("/lustre/datasets/laion-subset/urls.parquet",
                                                  True)}  # fmt: skip
    _posture(t0, s, _check(t0, versions=dict(PATCHED) | {"torch": "2.6.0+cu124", "ray": "2.44.1"},
                           datasets=datasets))  # fmt: skip
    return s


SCENARIOS: tuple[Callable[[int], Scenario], ...] = (
    xid_burst_new_job,
    xid_burst_unknown_binary,
    benign_xid_bug_established_job,
    benign_xid_few_in_new_job,
    posture_vulnerable_torch,
    posture_old_runc,
    posture_no_gpu_reset,
    posture_unhashed_dataset,
    benign_patched_node,
)


def node_fact_scenarios(t0: int) -> list[Scenario]:
    """Every node-fact scenario, starting at ``t0`` (ns since the epoch)."""
    return [make(t0) for make in SCENARIOS]
