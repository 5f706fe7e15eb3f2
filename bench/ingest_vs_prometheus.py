"""Ingest cost of a 1,024-GPU cluster at 1 s: ``hpcscope serve`` against a real Prometheus.

    PYTHONPATH=src:. .venv/bin/python -m bench.ingest_vs_prometheus            # D = 60 s
    PYTHONPATH=src:. .venv/bin/python -m bench.ingest_vs_prometheus --seconds 120 --repeat 3

The load: the twin's 128-node topology (``128x8-h100``, 1,024 H100) serving one dcgm-exporter
page per node on loopback, in its own process (``--twin-only``: its CPU counts for neither
side), started afresh for each side. Every GPU's mapping file holds ``--jobs-per-gpu`` job
lines (default 2: the twin's demo job, where one runs, plus a shared job per node), so
dcgm-exporter writes that many ``hpc_job`` copies of every series of the GPU, as it does for a
shared GPU. Both scrapers read the same
``file_sd`` file of the 128 dcgm targets every second.

1. ``hpcscope serve`` (the collector as deployed: targets file, 1 s interval, the web server
   idle) runs for ``--warmup`` + ``--seconds``; its CPU time (``/proc/<pid>/stat`` utime +
   stime, children included) over the ``--seconds`` window divided by the window is its core
   share; VmHWM is its peak RSS. After it stops, the store is brought to rest (every minute's
   partial rollup rows compacted, as the grace period would, then CHECKPOINT): bytes per
   sample = (file size - the size of an empty store) / metric values stored in
   ``gpu_samples``, one per GPU, field and scrape (a shared GPU's values count once).
2. Prometheus (``/usr/bin/prometheus``, 1 s scrape interval, same timeout) the same way; its
   TSDB size (head WAL, uncompacted) is informative only.

The machine may be shared: compare the ratio of the two core shares measured in the same run,
and repeat (``--repeat``; medians are reported). The last line is one JSON object::

    {"hpcscope_core_share": a, "prometheus_core_share": b, "ratio": a/b,
     "hpcscope_peak_rss_mb": r, "bytes_per_sample": s}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx2

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = "/usr/bin/prometheus"
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    """What one scraper cost over the measured window."""

    name: str
    core_share: float
    """CPU seconds (user + system, children included) per wall second of the window."""
    peak_rss_mb: float
    """VmHWM of the process, MiB."""
    scrapes_ok: int
    scrapes_expected: int
    """Targets x window seconds: every target scraped once a second."""
    stored_bytes: int
    """hpcscope: store file after CHECKPOINT minus an empty store; Prometheus: TSDB dir."""
    samples_stored: int
    """hpcscope: metric values in gpu_samples; Prometheus: samples appended in the window."""
    rows_per_page: float
    """hpcscope: gpu_samples rows per successful scrape (GPU rows of one page)."""


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` in seconds (``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): utime is field 14
    return sum(int(fields[index]) for index in (11, 12, 13, 14)) / TICKS_PER_SECOND


def peak_rss_mb(pid: int) -> float:
    """VmHWM of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    return env


# ---------------------------------------------------------------------- the load


def run_twin(state_dir: Path, *, nodes: int, jobs_per_gpu: int) -> None:
    """The load process: the 128-node twin, and ``jobs_per_gpu`` lines per GPU mapping file."""
    from hpcscope.model.topology import load_topology
    from hpcscope.service.settings import bundled_topology
    from hpcscope.twin import mapping
    from hpcscope.twin.cluster import TwinCluster

    topology = load_topology(bundled_topology("128x8-h100"))
    twin = TwinCluster(topology, state_dir, scenario="demo", arrivals_per_hour=0.0)
    twin.start()
    chosen = list(twin.dcgm_ports.items())[:nodes]
    for index, (node, _port) in enumerate(chosen):
        directory = twin.mapping_dir(node)
        for gpu in range(len(topology.node(node).gpus)):
            current = mapping.read_mapping(directory).get(str(gpu), [])
            for extra in range(jobs_per_gpu - len(current)):
                mapping.add_job(directory, str(gpu), str(900000 + index * 10 + extra))
    targets = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"exporter": "dcgm", "node": node}}
        for node, port in chosen
    ]
    temp = state_dir / ".bench-targets.json"
    temp.write_text(json.dumps(targets, indent=2))
    temp.replace(state_dir / "bench-targets.json")
    stop = False

    def finish(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    while not stop:
        time.sleep(0.2)
    twin.stop()


@contextlib.contextmanager
def twin_load(workdir: Path, *, nodes: int, jobs_per_gpu: int) -> Iterator[Path]:
    """Start the load process; yield the targets file once every page answers."""
    state = workdir / "twin"
    state.mkdir()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.ingest_vs_prometheus", "--twin-only", str(state)),
            *(f"--nodes={nodes}", f"--jobs-per-gpu={jobs_per_gpu}"),
        ],
        cwd=REPO,
        env=_python_env(),
        stderr=(workdir / "twin.log").open("wb"),
    )
    try:
        targets = state / "bench-targets.json"
        deadline = time.monotonic() + 120
        while not targets.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"twin did not start: {(workdir / 'twin.log').read_text()}")
            time.sleep(0.2)
        yield targets
        if process.poll() is not None:
            raise RuntimeError(f"the twin died: {(workdir / 'twin.log').read_text()[-3000:]}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def page_samples(targets: Path) -> tuple[int, int]:
    """(pages, samples on the first page): what one scrape round reads."""
    entries = json.loads(targets.read_text())
    text = httpx2.get(f"http://{entries[0]['targets'][0]}/metrics", timeout=10).text
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return len(entries), samples


# ---------------------------------------------------------------------- the two sides


def _window(pid: int, warmup: float, seconds: float) -> float:
    """Sleep ``warmup``, then measure CPU seconds per wall second over ``seconds``."""
    time.sleep(warmup)
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cpu1, wall1 = cpu_seconds(pid), time.monotonic()
    return (cpu1 - cpu0) / (wall1 - wall0)


def _stop(process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_hpcscope(
    workdir: Path, targets: Path, *, warmup: float, seconds: float, timeout: float
) -> Side:
    """``hpcscope serve`` on the targets for warmup + seconds; its cost and its store."""
    store = workdir / "hpcscope.duckdb"
    empty = workdir / "empty.duckdb"
    settings = workdir / "hpcscope.yaml"
    settings.write_text(
        json.dumps(
            {
                "store_path": str(store),
                "targets_path": str(targets),
                "scrape_interval_seconds": 1.0,
                "scrape_timeout_seconds": timeout,
                "scheduler_source": "none",
                "port": 0,
            }
        )
    )
    log = (workdir / "hpcscope.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "hpcscope", "serve", "--config", str(settings)],
        cwd=workdir,
        env=_python_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    started = time.time()
    try:
        core_share = _window(process.pid, warmup, seconds)
        window_end = time.time()
        rss = peak_rss_mb(process.pid)
    finally:
        _stop(process)
        log.close()
    if not store.exists():
        log_text = (workdir / "hpcscope.log").read_text()
        raise RuntimeError(f"hpcscope serve failed ({process.returncode}): {log_text}")
    stats = _store_figures(store, empty, start=started + warmup, end=window_end)
    pages = len(json.loads(targets.read_text()))
    return Side(
        name="hpcscope",
        core_share=core_share,
        peak_rss_mb=rss,
        scrapes_ok=stats["scrapes_ok"],
        scrapes_expected=round(pages * (window_end - started - warmup)),
        stored_bytes=stats["stored_bytes"],
        samples_stored=stats["samples_stored"],
        rows_per_page=stats["rows"] / max(stats["all_scrapes_ok"], 1),
    )


def _store_figures(store: Path, empty: Path, *, start: float, end: float) -> dict[str, int]:
    """Scrapes in the window, rows and metric values stored, bytes after CHECKPOINT."""
    from datetime import UTC, datetime

    import duckdb

    from hpcscope.model.schemas import GPU_METRICS
    from hpcscope.store import Store

    Store(empty).close()  # every migration, no rows: the fixed cost of a store
    with Store(store) as opened:  # at rest: every minute's partial rollup rows compacted
        newest = opened.query("SELECT max(ts) AS ts FROM gpu_samples").to_pylist()[0]["ts"]
        if newest is not None:
            opened.finalise_rollups(newest).result()
    for path in (store, empty):
        with contextlib.closing(duckdb.connect(str(path))) as con:
            con.execute("CHECKPOINT")
    begin = datetime.fromtimestamp(start, UTC).replace(tzinfo=None)
    finish = datetime.fromtimestamp(end, UTC).replace(tzinfo=None)
    values = " + ".join(f'count("{m.column}")' for m in GPU_METRICS)
    with contextlib.closing(duckdb.connect(str(store), read_only=True)) as con:
        ok = con.execute(
            "SELECT count(*) FILTER (ok AND ts >= ? AND ts < ?), count(*) FILTER (ok) "
            "FROM scrapes WHERE exporter = 'dcgm'",
            [begin, finish],
        ).fetchall()[0]
        rows, samples = con.execute(f"SELECT count(*), {values} FROM gpu_readings").fetchall()[0]
    return {
        "scrapes_ok": int(ok[0]),
        "all_scrapes_ok": int(ok[1]),
        "rows": int(rows),
        "samples_stored": int(samples),
        "stored_bytes": store.stat().st_size - empty.stat().st_size,
    }


def run_prometheus(
    workdir: Path, targets: Path, *, warmup: float, seconds: float, timeout: float
) -> Side:
    """A real Prometheus scraping the same targets every second."""
    if not Path(PROMETHEUS).exists():
        raise RuntimeError(f"{PROMETHEUS} not found: install Debian's prometheus")
    home = workdir / "prometheus"
    home.mkdir()
    (home / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 1s, scrape_timeout: {timeout:g}s}}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm\n"
        f"    file_sd_configs: [{{files: ['{targets}'], refresh_interval: 1m}}]\n"
    )
    with socket_port() as port:
        pass
    log = (home / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            "--config.file=prometheus.yml",
            f"--storage.tsdb.path={home / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus: {(home / 'prometheus.log').read_text()}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        time.sleep(warmup)
        appended0 = _self_metric(url, "prometheus_tsdb_head_samples_appended_total")
        cpu0, wall0 = cpu_seconds(process.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = cpu_seconds(process.pid), time.monotonic()
        appended1 = _self_metric(url, "prometheus_tsdb_head_samples_appended_total")
        window = wall1 - wall0
        rss = peak_rss_mb(process.pid)
        span = max(1, round(window))
        ok = _prom_value(url, f"sum(sum_over_time(up[{span}s]))")
        pages = len(json.loads(targets.read_text()))
    finally:
        _stop(process)
        log.close()
    tsdb = sum(p.stat().st_size for p in (home / "tsdb").rglob("*") if p.is_file())
    return Side(
        name="prometheus",
        core_share=(cpu1 - cpu0) / window,
        peak_rss_mb=rss,
        scrapes_ok=int(ok),
        scrapes_expected=round(pages * window),
        stored_bytes=tsdb,
        samples_stored=int(appended1 - appended0),
        rows_per_page=0.0,
    )


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _self_metric(url: str, name: str) -> float:
    """Sum of a metric on Prometheus' own /metrics page (it does not scrape itself here)."""
    text = httpx2.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name)] in " {"
    )


def _prom_value(url: str, expr: str) -> float:
    body = httpx2.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


# ---------------------------------------------------------------------- report


def measure(args: argparse.Namespace) -> list[tuple[Side, Side]]:
    runs: list[tuple[Side, Side]] = []
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmp:
        work = Path(tmp)
        for attempt in range(args.repeat):
            run_dir = work / f"run{attempt}"
            run_dir.mkdir()
            sides: list[Side] = []
            # a fresh load for each side: the twin's state (its simulated jobs, its threads
            # under a long run on a loaded machine) is the same for both
            for run_side in (run_hpcscope, run_prometheus):
                load_dir = run_dir / f"load-{run_side.__name__}"
                load_dir.mkdir()
                with twin_load(
                    load_dir, nodes=args.nodes, jobs_per_gpu=args.jobs_per_gpu
                ) as targets:
                    pages, samples = page_samples(targets)
                    print(f"load: {pages} pages x {samples} samples, every 1 s", flush=True)
                    side = run_side(
                        run_dir,
                        targets,
                        warmup=args.warmup,
                        seconds=args.seconds,
                        timeout=args.timeout,
                    )
                    page_samples(targets)  # a load that stopped answering invalidates the run
                print(json.dumps(asdict(side)), flush=True)
                sides.append(side)
            runs.append((sides[0], sides[1]))
            if args.keep:
                shutil.copytree(run_dir, Path(args.keep) / run_dir.name, dirs_exist_ok=True)
    return runs


def summary(runs: Sequence[tuple[Side, Side]]) -> dict[str, float]:
    """Medians over the runs; the ratio is taken per run (same machine load), then the median."""
    ours = [a for a, _ in runs]
    return {
        "hpcscope_core_share": round(statistics.median(a.core_share for a in ours), 4),
        "prometheus_core_share": round(statistics.median(b.core_share for _, b in runs), 4),
        "ratio": round(statistics.median(a.core_share / b.core_share for a, b in runs), 3),
        "hpcscope_peak_rss_mb": round(statistics.median(a.peak_rss_mb for a in ours), 1),
        "bytes_per_sample": round(
            statistics.median(a.stored_bytes / max(a.samples_stored, 1) for a in ours), 3
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (D)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the window")
    parser.add_argument("--repeat", type=int, default=1, help="runs of both sides")
    parser.add_argument("--nodes", type=int, default=128, help="dcgm targets (of 128)")
    parser.add_argument("--jobs-per-gpu", type=int, default=2, help="hpc_job copies per GPU")
    parser.add_argument("--timeout", type=float, default=1.0, help="scrape timeout, seconds")
    parser.add_argument("--keep", help="copy each run's stores and logs to this directory")
    parser.add_argument("--twin-only", metavar="STATE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.twin_only:
        run_twin(Path(args.twin_only), nodes=args.nodes, jobs_per_gpu=args.jobs_per_gpu)
        return 0
    runs = measure(args)
    for ours, theirs in runs:
        print(
            f"hpcscope {ours.core_share:.3f} cores, {ours.peak_rss_mb:.0f} MiB peak, "
            f"{ours.scrapes_ok}/{ours.scrapes_expected} scrapes, "
            f"{ours.rows_per_page:.1f} rows/page, "
            f"{ours.stored_bytes / max(ours.samples_stored, 1):.2f} B/sample | "
            f"prometheus {theirs.core_share:.3f} cores, {theirs.peak_rss_mb:.0f} MiB peak, "
            f"{theirs.scrapes_ok}/{theirs.scrapes_expected} scrapes, "
            f"TSDB {theirs.stored_bytes / max(theirs.samples_stored, 1):.2f} B/sample (WAL)",
            flush=True,
        )
    print(json.dumps(summary(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
