"""The running twin: scheduler, per-node dcgm-exporter endpoints and slurmrestd, on loopback.

:class:`TwinCluster` starts one HTTP server per node serving ``/metrics`` (dcgm-exporter format)
and one serving ``/slurm/v0.0.40/jobs`` (slurmrestd format), advances the simulated scheduler on
a background thread, and writes a Prometheus ``file_sd`` targets file so that any scraper —
hpcscope's collector or a real Prometheus — finds the endpoints. Simulated time runs at
``speed`` times real time from the moment the twin starts.

State directory layout::

    <state_dir>/targets.json            file_sd: dcgm endpoints (labels: node, exporter)
    <state_dir>/twin.json               ports, slurmrestd URL and settings of this run
    <state_dir>/nodes/<node>/hpc-job-mapping/<gpu>   what the Slurm prolog writes
    <state_dir>/capture/<job>/                      the training jobs' capture windows: Kineto
                                                    traces, meta, NCCL logs (twin/traces.py)
    <state_dir>/lustre/<server>.job_stats           ``lctl get_param`` job_stats of each Lustre
                                                    server (:mod:`hpcscope.twin.lustre`)
    <state_dir>/falco/events.json                   Falco's file_output: the twin's attacks
    <state_dir>/tetragon/events.json                Tetragon's export (and the bpftrace
                                                    sensor's), jobs from <state_dir>/proc/
    <state_dir>/integrity/<job>/rank-<r>.jsonl      the gradient-integrity hook's records

The demo scenario plays one incident per threat vector every 10 minutes, counted from the first
poll of its slurmrestd job list (:mod:`hpcscope.twin.live_incidents`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from hpcscope.model.topology import Hca, Topology
from hpcscope.twin.dcgm import DcgmEndpoint
from hpcscope.twin.http_routes import (
    Action,
    Collectable,
    Route,
    Server,
    metrics_route,
    serve_routes,
)
from hpcscope.twin.live_incidents import LiveIncidents
from hpcscope.twin.lustre import LustreJobStats
from hpcscope.twin.node_exporter import InfinibandEndpoint, PortTraffic
from hpcscope.twin.scheduler import Scheduler, SimJob
from hpcscope.twin.slurmrestd import jobs_response
from hpcscope.twin.traces import TraceSpool
from hpcscope.twin.workloads import (
    RAIL_COLLECTIVE_BYTES_PER_SECOND,
    STORAGE_READ_BYTES_PER_SECOND,
    Profile,
    TimeShares,
    shares_for,
)

log = logging.getLogger(__name__)

__all__ = [
    "Action",
    "Collectable",
    "FileSdTarget",
    "Route",
    "TwinCluster",
    "job_gpu_shares",
    "metrics_route",
    "serve_routes",
]


class FileSdTarget(TypedDict):
    """One entry of a Prometheus ``file_sd`` file."""

    targets: list[str]
    labels: dict[str, str]


def job_gpu_shares(
    topology: Topology, scheduler: Scheduler, job: SimJob, node: str, gpu_index: int, now: float
) -> TimeShares:
    """The time budget of one GPU of a running job at ``now``: its profile's, or, once the
    job's Xid fired, a stopped faulty GPU and peers hanging in NCCL until the job is killed."""
    memory = topology.node(node).gpus[gpu_index].model.memory_bytes
    if job.faulted(now):
        if scheduler.failing_gpu(job) == (node, gpu_index):
            return TimeShares(0.0, 0.0, 0.0, 0.0, 0.3 * memory, 0.0, 0.0)
        return TimeShares(0.0, 1.0, 0.0, 0.0, 0.8 * memory, 0.0, 0.0)
    return shares_for(
        job.profile,
        gpu_index=job.allocation.index((node, gpu_index)),
        straggler_gpu=job.straggler_gpu,
        memory_bytes=memory,
    )


class TwinCluster:
    """A simulated cluster emitting real formats on loopback.

    Args:
        topology: the cluster to simulate.
        state_dir: where mapping files, the targets file and run info go.
        seed: seeds arrivals, profiles and counter noise (same seed, same run).
        speed: simulated seconds per real second.
        host: listen address (loopback by default).
        base_port: first port of the per-node dcgm endpoints (0: ephemeral ports).
        scenario: ``"demo"`` submits one job per workload profile at start; ``"empty"`` none.
        arrivals_per_hour: mean rate of new random jobs (simulated hours).
        dcgm_collect_interval_seconds: the dcgm endpoints collect once per this many simulated
            seconds and serve that page to every scrape in between (dcgm-exporter's ``-c``);
            0 collects at every scrape.
    """

    def __init__(
        self,
        topology: Topology,
        state_dir: Path,
        *,
        seed: int = 42,
        speed: float = 1.0,
        host: str = "127.0.0.1",
        base_port: int = 0,
        scenario: str = "demo",
        arrivals_per_hour: float = 20.0,
        dcgm_collect_interval_seconds: float = 0.0,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.topology = topology
        self.state_dir = state_dir
        self.seed = seed
        self.speed = speed
        self.host = host
        self.base_port = base_port
        self.scenario = scenario
        self.dcgm_collect_interval_seconds = dcgm_collect_interval_seconds
        self._start_wall = time.time()
        self._start_monotonic = time.monotonic()
        self.scheduler = Scheduler(
            topology,
            state_dir / "nodes",
            start_time=self._start_wall,
            seed=seed,
            arrivals_per_hour=arrivals_per_hour,
        )
        self._lock = threading.RLock()
        self._servers: list[Server] = []
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.dcgm_ports: dict[str, int] = {}
        self.dcgm_endpoints: dict[str, DcgmEndpoint] = {}
        self.unmapped_work: dict[tuple[str, int], Profile] = {}
        """GPUs busy with no job mapped to them (a miner, SC-4's fault), by (node, GPU)."""
        self.node_exporter_ports: dict[str, int] = {}
        self.slurmrestd_port: int | None = None
        # None when the topology's storage is not Lustre
        self.lustre = LustreJobStats.from_topology(topology, seed=seed)
        # the golden path's trace capture of the training jobs (hpcscope.twin.traces)
        self.traces = TraceSpool(state_dir / "capture", seed=seed)
        # one incident per threat vector every 10 minutes (demo scenario), from the first poll
        # of the job list (_jobs_route): when collection starts, not when the twin does
        self.incidents = LiveIncidents(
            state_dir,
            start=None,
            checkpoint_root=topology.checkpoint_root,
            ib_errors=self._ib_errors,
            dataset_write=self._dataset_write if self.lustre and self.lustre.read_only else None,
        )
        self._ib_endpoints: dict[str, InfinibandEndpoint] = {}

    def now(self) -> float:
        """Simulated epoch seconds."""
        return self._start_wall + (time.monotonic() - self._start_monotonic) * self.speed

    def set_dcgm_collect_phase(self, seconds: float) -> None:
        """Start the dcgm endpoints' collect intervals ``seconds`` after each multiple of the
        interval (to line them up with a scraper's or an engine's evaluation instants)."""
        for endpoint in self.dcgm_endpoints.values():
            endpoint.collect_phase_seconds = seconds

    def mapping_dir(self, node: str) -> Path:
        return self.scheduler.mapping_dir(node)

    @property
    def falco_events_path(self) -> Path:
        """Falco's ``file_output`` of the twin: the attacks it plays, in Falco's JSON."""
        return self.state_dir / "falco" / "events.json"

    def _write_demo_attack(self, now: float) -> None:
        """The demo's opening attack: the supply-chain miner (ultralytics 8.3.41 style) dropped
        in /tmp and run inside the first running job of alice, as hpcscope's SC-2 Falco rule
        reports it, so Threats mode shows an open alert out of the box."""
        from hpcscope.twin.attacks import miner_falco_line

        running = [j for j in self.scheduler.jobs.values() if j.user == "alice" and j.nodes]
        path = self.falco_events_path
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            miner_falco_line(
                job_id=str(job.job_id), node=job.nodes[0], user=job.user, time_ns=int(now * 1e9)
            )
            for job in running[:1]
        ]
        temp = path.with_name(f".{path.name}.tmp")  # a new file: a tailer starts at line 1
        temp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        temp.replace(path)

    @property
    def lustre_dir(self) -> Path | None:
        """The spool directory of the Lustre servers' job_stats files (None: no Lustre)."""
        return None if self.lustre is None else self.state_dir / "lustre"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self.scenario == "demo":
                self.scheduler.submit_demo_scenario()
            elif self.scenario != "empty":
                raise ValueError(f"unknown scenario {self.scenario!r}")
            now = self.now()
            self.scheduler.tick(now)
            self._tick_lustre(now)
            self.traces.advance(now, self.scheduler.jobs.values())
            if self.scenario == "demo":
                self._write_demo_attack(now)
                self.incidents.open_export()
        for offset, node in enumerate(self.topology.nodes):
            endpoint = DcgmEndpoint(
                node.name,
                node.gpus,
                self.mapping_dir(node.name),
                shares=self._shares_source(node.name),
                clock=self.now,
                seed=self.seed * 1000 + offset,
                xid_source=self._xid_source(node.name),
                collect_interval_seconds=self.dcgm_collect_interval_seconds,
            )
            self.dcgm_endpoints[node.name] = endpoint
            port = self.base_port + offset if self.base_port else 0
            server, _ = serve_routes(self.host, port, {"/metrics": metrics_route(endpoint)})
            self._servers.append(server)
            self.dcgm_ports[node.name] = server.server_address[1]
            if node.hcas:
                infiniband = InfinibandEndpoint(
                    node.hcas,
                    traffic=self._ib_traffic(node.name),
                    clock=self.now,
                    seed=self.seed * 1000 + offset,
                )
                ib_port = self.base_port + 100 + offset if self.base_port else 0
                ib_server, _ = serve_routes(
                    self.host, ib_port, {"/metrics": metrics_route(infiniband)}
                )
                self._servers.append(ib_server)
                self.node_exporter_ports[node.name] = ib_server.server_address[1]
                self._ib_endpoints[node.name] = infiniband
        rest_port = self.base_port + len(self.topology.nodes) if self.base_port else 0
        rest, _ = serve_routes(
            self.host,
            rest_port,
            {"/slurm/v0.0.40/jobs": self._jobs_route},
            {
                "DELETE /slurm/v0.0.40/job/": self._cancel_route,
                "POST /hooks/notify": self._webhook_route,
            },
        )
        self._servers.append(rest)
        self.slurmrestd_port = rest.server_address[1]
        self._write_run_files()
        self._ticker = threading.Thread(target=self._tick_loop, name="twin-scheduler", daemon=True)
        self._ticker.start()
        log.info(
            "twin %s started: %d dcgm endpoints, slurmrestd on %s:%s, speed x%g",
            self.topology.name,
            len(self.dcgm_ports),
            self.host,
            self.slurmrestd_port,
            self.speed,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        for server in self._servers:
            server.shutdown()
            server.server_close()
        self._servers.clear()

    def __enter__(self) -> TwinCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick_loop(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                now = self.now()
                self.scheduler.tick(now)
                self._tick_lustre(now)
                self.traces.advance(now, self.scheduler.jobs.values())
                if self.scenario == "demo":
                    for vector in self.incidents.advance(now, self.scheduler.jobs.values()):
                        log.info("twin: incident played (%s)", vector)

    def _tick_lustre(self, now: float) -> None:
        """Count the jobs' Lustre I/O up to now and rewrite the servers' job_stats files."""
        if self.lustre is None or self.lustre_dir is None:
            return
        self.lustre.advance(now, self.scheduler.jobs.values())
        self.lustre.write(self.lustre_dir)

    # ------------------------------------------------------------------ endpoints

    def _shares_source(self, node: str) -> Callable[[int], TimeShares | None]:
        def shares(gpu_index: int) -> TimeShares | None:
            with self._lock:
                self.scheduler.tick(self.now())
                job = self.scheduler.running_on(node).get(gpu_index)
                if job is None:
                    rogue = self.unmapped_work.get((node, gpu_index))
                    if rogue is None:
                        return None
                    memory = self.topology.nodes[0].gpus[0].model.memory_bytes
                    return shares_for(
                        rogue, gpu_index=gpu_index, straggler_gpu=None, memory_bytes=memory
                    )
                return job_gpu_shares(
                    self.topology, self.scheduler, job, node, gpu_index, self.now()
                )

        return shares

    def _ib_traffic(self, node: str) -> Callable[[Hca], PortTraffic]:
        def traffic(hca: Hca) -> PortTraffic:
            with self._lock:
                job = self.scheduler.running_on(node).get(hca.gpu_index or 0)
                if job is None or hca.gpu_index is None or job.faulted(self.now()):
                    return PortTraffic(0.0, 0.0)
                read = STORAGE_READ_BYTES_PER_SECOND[job.profile]
                rx, tx = read, read * 0.02  # reads, and the RPCs that ask for them
                if len(job.nodes) > 1:  # the rail carries its share of the AllReduce
                    shares = shares_for(
                        job.profile, gpu_index=0, straggler_gpu=None, memory_bytes=1.0
                    )
                    rx += shares.collective * RAIL_COLLECTIVE_BYTES_PER_SECOND
                    tx += shares.collective * RAIL_COLLECTIVE_BYTES_PER_SECOND
                return PortTraffic(rx, tx)

        return traffic

    def _ib_errors(self, node: str, gpu: int, family: str, count: float) -> bool:
        """Error counts on the port of ``gpu``'s rail on ``node`` (the live incidents)."""
        endpoint = self._ib_endpoints.get(node)
        if endpoint is None:
            return False
        for index, hca in enumerate(endpoint.hcas):
            if hca.gpu_index == gpu:
                endpoint.add_errors(index, family, count)
                return True
        return False

    def _dataset_write(self, job: SimJob, now: float) -> bool:
        """2 GiB from ``job``'s first node to the first OST of the datasets' pool."""
        if self.lustre is None or not job.allocation:
            return False
        target = min(self.lustre.read_only)
        self.lustre.write_burst(job, job.allocation[0][0], target, 2 * 2**30, now)
        return True

    def _xid_source(self, node: str) -> Callable[[int], int]:
        def xid(gpu_index: int) -> int:
            with self._lock:
                return self.scheduler.xid_of(node, gpu_index, self.now())

        return xid

    def _jobs_route(self) -> tuple[int, str, bytes]:
        with self._lock:
            self.incidents.anchor(self.now())  # collection started: the incidents' cycle too
            self.scheduler.tick(self.now())
            body = jobs_response(
                self.scheduler.visible_jobs(),
                cluster=self.topology.slurm_cluster_name,
                now=self.now(),
            )
        return 200, "application/json", json.dumps(body).encode()

    def _cancel_route(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        """slurmrestd's ``DELETE /slurm/v0.0.40/job/{job_id}``: scancel."""
        job_id = path.rsplit("/", 1)[-1]
        with self._lock:
            if not job_id.isdigit() or int(job_id) not in self.scheduler.jobs:
                answer = {"errors": [{"error": f"Job {job_id} not found", "error_number": 2017}]}
                return 404, "application/json", json.dumps(answer).encode()
            job = self.scheduler.jobs[int(job_id)]
            if job.end_time is not None:  # slurmctld's ESLURM_ALREADY_DONE
                answer = {"errors": [{"error": "Job/step already completing or completed",
                                      "error_number": 2021}]}  # fmt: skip
                return 500, "application/json", json.dumps(answer).encode()
            self.scheduler.cancel(int(job_id), at=self.now())
        return 200, "application/json", json.dumps({"errors": [], "warnings": []}).encode()

    @property
    def webhook_path(self) -> Path:
        """What the demo's notification webhook received: one JSON body per line."""
        return self.state_dir / "webhook" / "messages.jsonl"

    def _webhook_route(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        """A chat channel's incoming webhook: the JSON body, kept one per line."""
        json.loads(body)  # a body that is not JSON is the sender's bug: 500, in the log
        self.webhook_path.parent.mkdir(parents=True, exist_ok=True)
        with self.webhook_path.open("ab") as handle:
            handle.write(body.replace(b"\n", b" ") + b"\n")
        return 200, "text/plain", b"ok\n"

    # ------------------------------------------------------------------ discovery

    def targets(self) -> list[FileSdTarget]:
        """Prometheus file_sd entries for every endpoint of the twin."""
        dcgm: list[FileSdTarget] = [
            {"targets": [f"{self.host}:{port}"], "labels": {"exporter": "dcgm", "node": node}}
            for node, port in self.dcgm_ports.items()
        ]
        node_exporters: list[FileSdTarget] = [
            {"targets": [f"{self.host}:{port}"], "labels": {"exporter": "node", "node": node}}
            for node, port in self.node_exporter_ports.items()
        ]
        return dcgm + node_exporters

    @property
    def slurmrestd_url(self) -> str:
        return f"http://{self.host}:{self.slurmrestd_port}"

    def _write_run_files(self) -> None:
        (self.state_dir / "targets.json").write_text(json.dumps(self.targets(), indent=2))
        (self.state_dir / "twin.json").write_text(
            json.dumps(
                {
                    "topology": self.topology.name,
                    "seed": self.seed,
                    "speed": self.speed,
                    "dcgm_ports": self.dcgm_ports,
                    "slurmrestd_port": self.slurmrestd_port,
                    "slurmrestd_url": self.slurmrestd_url,
                    "started_at": self._start_wall,
                    "lustre_dir": None if self.lustre_dir is None else str(self.lustre_dir),
                    "falco_events_path": str(self.falco_events_path),
                    "tetragon_events_path": str(self.incidents.tetragon_path),
                    "tetragon_proc_root": str(self.incidents.proc_root),
                    "integrity_dir": str(self.incidents.integrity_root),
                    "webhook_url": f"{self.slurmrestd_url}/hooks/notify",
                    "capture_dir": str(self.traces.root),
                },
                indent=2,
            )
        )
