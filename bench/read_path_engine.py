"""Read-path budgets on the ``prometheus`` backend: the 128-node twin scraped by a real
Prometheus evaluating the engine recording rules, read by an hpcscope with no GPU collector.

    .venv/bin/python -m bench.read_path --backend prometheus --minutes 6

The twin (``128x8-h100``, seeded) runs, in a process of its own, one job on every one of its
1,024 GPUs and is scraped by Debian's ``prometheus`` every ``--scrape-seconds`` with the engine
rules evaluated every minute (:mod:`hpcscope.cli.prometheus_process`); hpcscope's collector
polls the twin's slurmrestd only.
The store also holds ``10,000 x scale`` finished jobs with their kept summaries (as the
embedded bench writes them), so the job list lists 200 jobs. After ``--minutes``, each read is
timed (median of ``--rounds``) as the web app runs it: the big job's report, the overview, the
job list and the diagram's live state, in that order, all as of one time. The last line printed
is one JSON object: ``job_report_s``, ``overview_s``, ``job_list_s``, ``diagram_s``, how the
report was read, the sizes, and each read's first call (``*_first_s``): the backend keeps rule
answers while the engine's evaluations they hold are the same (at least one scrape interval),
and the newest samples one scrape interval (``docs/storage.md``), so later calls, and a read
after another that asked the same, are answered from them. Budgets: job
report <= 1 s, overview <= 200 ms, job list <= 200 ms, diagram <= 300 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from tests.support.collect import collector_for

from hpcscope.cli.prometheus_process import run_prometheus
from hpcscope.model.access import Principal, Role
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import load_topology
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import Viewer, live_state
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import Settings, bundled_topology
from hpcscope.service.source_settings import SlurmSection
from hpcscope.twin.cluster import TwinCluster
from hpcscope.twin.workloads import Profile

ADMIN = Principal(name="admin", role=Role.ADMIN)


def _median(fn: Callable[[], object], rounds: int, firsts: list[float]) -> tuple[float, object]:
    """The median time of ``rounds`` calls and the last result; the first call's time is
    appended to ``firsts`` (before the backend kept any answer of that read)."""
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    firsts.append(times[0])
    return statistics.median(times), result


def _finished_history(service: Service, *, scale: float, seed: int) -> int:
    """The embedded bench's finished jobs and their kept summaries, in this store (their raw
    samples are summarised by the store's own backend, then never read again)."""
    from bench.read_path import generate_finished

    generate_finished(service.store, scale=scale, seed=seed, now=utcnow())
    written = 0
    while step := summarise_finished_jobs(
        service.store, now=utcnow(), scrape_interval_seconds=15.0
    ):
        written += step
    return written


def _twin(
    state_dir: Path, seed: int, scrape_seconds: int, ready: Queue[tuple[str, str]], stop: Event
) -> None:
    """The twin in a process of its own, as exporters run on their own nodes: in the bench's
    process its 128 exporters' pages would share the interpreter with the reads being timed."""
    twin = TwinCluster(
        load_topology(bundled_topology("128x8-h100")),
        state_dir,
        seed=seed,
        speed=1.0,
        scenario="empty",
        arrivals_per_hour=0,
        dcgm_collect_interval_seconds=float(scrape_seconds),
    )
    with twin:
        with twin._lock:
            big = twin.scheduler.submit(
                name="llama-70b-pretrain", user="alice", account="vision",
                profile=Profile.STRAGGLER, gpus=1024, duration_seconds=86_400.0,
                spread_nodes=128, straggler_gpu=6,
            )  # fmt: skip
        ready.put((twin.slurmrestd_url, str(big.job_id)))
        stop.wait()


def _keep(tmp: Path, keep: Path, *, now: datetime, job: str, scrape_seconds: int) -> None:
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tmp / "prometheus" / "tsdb", keep / "tsdb", dirs_exist_ok=True)
    shutil.copy2(tmp / "store.duckdb", keep / "store.duckdb")
    meta = {"now": now.isoformat(), "job": job, "scrape_seconds": scrape_seconds}
    (keep / "meta.json").write_text(json.dumps(meta))


def run(
    *,
    minutes: float,
    scrape_seconds: int,
    scale: float,
    seed: int,
    rounds: int,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Scrape, then time the reads (the module docstring). ``keep``: copy Prometheus' TSDB and
    the store there once both are closed, with the time the reads were made at and the job
    (``meta.json``), to look at a slow read again without a twin or a scrape: start
    ``prometheus --storage.tsdb.path KEEP/tsdb`` and query at ``meta.json``'s ``now``."""
    topology = load_topology(bundled_topology("128x8-h100"))
    spawn = multiprocessing.get_context("spawn")
    ready: Queue[tuple[str, str]] = spawn.Queue()
    stop = spawn.Event()
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        twin = spawn.Process(
            target=_twin, args=(tmp / "twin", seed, scrape_seconds, ready, stop), daemon=True
        )
        twin.start()
        try:
            slurmrestd_url, job = ready.get(timeout=300)
        except BaseException:
            twin.kill()
            raise
        with (
            run_prometheus(
                tmp / "prometheus",
                targets=tmp / "twin" / "targets.json",
                scrape_interval_seconds=scrape_seconds,
            ) as url,
        ):
            settings = Settings(
                store_path=tmp / "store.duckdb",
                scrape_interval_seconds=float(scrape_seconds),
                secret_key="bench",
                topology_path=bundled_topology("128x8-h100"),
                metrics_backend="prometheus",
                prometheus_url=url,
                slurm=SlurmSection(url=slurmrestd_url, poll_seconds=float(scrape_seconds)),
            )
            service = Service.open(settings, users=UserDirectory.demo())
            try:
                summaries = _finished_history(service, scale=scale, seed=seed)
                collector = collector_for(service.store, service.settings)
                collector.start()
                time.sleep(minutes * 60)
                collector.stop()
                now = utcnow()
                firsts: list[float] = []
                report_s, report = _median(
                    lambda: service.job_report(ADMIN, job, now=now), rounds, firsts
                )

                def overview() -> object:
                    state = live_state(service, Viewer(ADMIN), now=now)
                    live = service.live_job_gpus(ADMIN, window=service.live_window(), now=now)
                    return state, live, service.collection_health(now=now)

                overview_s, _ = _median(overview, rounds, firsts)
                list_s, listed = _median(
                    lambda: service.job_reports(ADMIN, now=now), rounds, firsts
                )
                diagram_s, state = _median(
                    lambda: live_state(service, Viewer(ADMIN), now=now), rounds, firsts
                )
            finally:
                service.close()
                stop.set()
                twin.join(timeout=60)
                if twin.is_alive():
                    twin.kill()
        if keep is not None:
            _keep(tmp, keep, now=now, job=job, scrape_seconds=scrape_seconds)
    assert report is not None and isinstance(listed, list)
    active = sum(1 for g in getattr(state, "gpus", {}).values() if g.state.value == "active")
    return {
        "backend": "prometheus",
        "minutes": minutes,
        "scrape_seconds": scrape_seconds,
        "gpus": topology.gpu_count,
        "summaries_written": summaries,
        "report_read": report.metrics.read if report.metrics else None,  # type: ignore[attr-defined]
        "report_gpus": report.gpus_observed,  # type: ignore[attr-defined]
        "job_list_jobs": len(listed),
        "diagram_gpus_active": active,
        "job_report_s": round(report_s, 4),
        "overview_s": round(overview_s, 4),
        "job_list_s": round(list_s, 4),
        "diagram_s": round(diagram_s, 4),
        **{
            f"{read}_first_s": round(first, 4)
            for read, first in zip(
                ("job_report", "overview", "job_list", "diagram"), firsts, strict=True
            )
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["prometheus"], default="prometheus")
    parser.add_argument("--minutes", type=float, default=6.0)
    parser.add_argument("--scrape-seconds", type=int, default=15)
    parser.add_argument("--scale", type=float, default=1.0, help="of the finished jobs")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="copy the TSDB and store here")
    args = parser.parse_args(argv)
    result = run(
        minutes=args.minutes,
        scrape_seconds=args.scrape_seconds,
        scale=args.scale,
        seed=args.seed,
        rounds=args.rounds,
        keep=args.keep,
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
