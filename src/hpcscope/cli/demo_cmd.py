"""``hpcscope demo``: a twin cluster, the collector and the web UI, on this machine.

Starts the digital twin of the default cluster as a separate process (its exporters serve on
loopback, its scheduler writes the job-mapping files), prints the URL and the demo logins, then
runs the hpcscope server in this process. Into a fresh DuckDB file it first writes 30 days of
the cluster's past through the collector's own parsers and merges (``service/history.py``;
``--no-history`` skips it), then the collector scrapes the live twin from there. ``--for 60s``
stops by itself (tests and CI smoke runs use it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import typer

from hpcscope.cli.durations import parse_duration
from hpcscope.cli.logs import configure_logging, log_level_or_default
from hpcscope.cli.output import EXIT_RUNTIME_ERROR, EXIT_USAGE_ERROR, fail, print_json

if TYPE_CHECKING:
    from hpcscope.service.core import Service

log = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def _start_twin(
    state_dir: Path, *, seed: int, speed: float, topology: str
) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    info_file = state_dir / "twin.json"
    info_file.unlink(missing_ok=True)
    # the twin's log goes to a file: a pipe nobody reads would fill and stop the twin, and its
    # per-job lines would crowd the demo's console
    log_file = state_dir / "twin.log"
    with log_file.open("wb") as log_handle:  # the child keeps its own descriptor
        process = _spawn_twin(state_dir, log_handle, seed=seed, speed=speed, topology=topology)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = log_file.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the twin exited with {process.returncode}: {err.strip()}")
        if info_file.exists():
            try:
                return process, json.loads(info_file.read_text())
            except json.JSONDecodeError:
                pass  # being written
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the twin did not start within 30 s (log: {log_file})")


def _spawn_twin(
    state_dir: Path, log_handle: BinaryIO, *, seed: int, speed: float, topology: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpcscope",
            "twin",
            "run",
            "--state-dir",
            str(state_dir),
            "--seed",
            str(seed),
            "--speed",
            str(speed),
            "--topology",
            topology,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log_handle,
    )


def demo(
    port: int = typer.Option(8080, help="Web UI port."),
    host: str = typer.Option("127.0.0.1", help="Web UI address."),
    duration: str | None = typer.Option(None, "--for", help="Stop after this long (60s, 5m)."),
    state_dir: Path = typer.Option(Path("var/demo"), help="Twin files and the demo store."),
    seed: int = typer.Option(42, help="Twin random seed."),
    speed: float = typer.Option(1.0, help="Simulated seconds per real second."),
    scrape_interval: float = typer.Option(2.0, help="Seconds between scrapes."),
    topology: str = typer.Option("2x8-h100", help="Bundled topology name or a YAML file."),
    keep_store: bool = typer.Option(False, help="Keep the previous demo store."),
    log_level: str | None = typer.Option(
        None,
        "--log-level",
        help="debug, info (default, or HPCSCOPE_LOG_LEVEL), warning, error. debug adds one "
        "line per scrape and per HTTP request.",
    ),
    log_format: str = typer.Option(
        "text", "--log-format", help="text, or json (one JSON object per line on stderr)."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print the URL and logins as one JSON document."
    ),
    history: bool = typer.Option(
        True,
        "--history/--no-history",
        help="Write 30 days of the cluster's past into a fresh store first (about 15 s).",
    ),
    backend: str = typer.Option(
        "embedded",
        "--backend",
        help="embedded (hpcscope scrapes the GPUs), or prometheus (a Prometheus started here "
        "scrapes them with the engine recording rules; hpcscope reads it, no GPU collector).",
    ),
) -> None:
    """Run the demo: twin cluster + collection + analysis + web UI on localhost."""
    level = log_level_or_default(log_level)
    configure_logging(level, log_format)
    from hpcscope.serve.allocator import tune_allocator

    tune_allocator()  # before Service.open starts the store's writer (serve/allocator.py)
    from hpcscope.service.settings import bundled_topology

    try:
        seconds = parse_duration(duration) if duration else None
        topology_path = Path(topology) if Path(topology).exists() else bundled_topology(topology)
        if backend not in ("embedded", "prometheus"):
            raise ValueError(f"--backend {backend!r}: embedded or prometheus")
        rules_dir = _dataset_rules(topology_path, state_dir / "rules")
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR)
    twin_dir = state_dir / "twin"
    store_path = state_dir / "hpcscope.duckdb"
    fresh = not keep_store or not store_path.exists()
    if not keep_store:
        store_path.unlink(missing_ok=True)
        Path(f"{store_path}.wal").unlink(missing_ok=True)
        shutil.rmtree(twin_dir / "nodes", ignore_errors=True)
        shutil.rmtree(twin_dir / "capture", ignore_errors=True)  # windows of the last run
    twin_dir.mkdir(parents=True, exist_ok=True)
    try:
        twin, info = _start_twin(twin_dir, seed=seed, speed=speed, topology=str(topology_path))
    except RuntimeError as exc:
        fail(str(exc), code=EXIT_RUNTIME_ERROR)
    with contextlib.ExitStack() as engines:
        engine: dict[str, object] = {}
        if backend == "prometheus":
            engine = _start_engine(engines, state_dir, twin_dir, scrape_interval, twin)
        _serve(
            twin,
            info,
            engine=engine,
            rules_dir=rules_dir,
            store_path=store_path,
            topology_path=topology_path,
            twin_dir=twin_dir,
            state_dir=state_dir,
            host=host,
            port=port,
            scrape_interval=scrape_interval,
            seconds=seconds,
            level=level,
            history=history and fresh,
            json_output=json_output,
        )


def _start_engine(
    engines: contextlib.ExitStack,
    state_dir: Path,
    twin_dir: Path,
    scrape_interval: float,
    twin: subprocess.Popen[bytes],
) -> dict[str, object]:
    """A real Prometheus scraping the twin with the engine rules (``--backend prometheus``)."""
    from hpcscope.cli.prometheus_process import EngineNotStarted, run_prometheus

    engine_dir = state_dir / "prometheus"
    shutil.rmtree(engine_dir, ignore_errors=True)
    try:
        url = engines.enter_context(
            run_prometheus(
                engine_dir,
                targets=twin_dir / "targets.json",
                scrape_interval_seconds=max(1, math.ceil(scrape_interval)),
            )
        )
    except EngineNotStarted as exc:
        twin.terminate()
        fail(str(exc), code=EXIT_RUNTIME_ERROR)
    return {
        "metrics_backend": "prometheus",
        "prometheus_url": url,
        # the demo's Prometheus has the rules from its start: read them as soon as they cover
        "prometheus_recording_rules": "auto",
    }


def _serve(
    twin: subprocess.Popen[bytes],
    info: dict[str, object],
    *,
    engine: dict[str, object],
    rules_dir: Path | None,
    store_path: Path,
    topology_path: Path,
    twin_dir: Path,
    state_dir: Path,
    host: str,
    port: int,
    scrape_interval: float,
    seconds: float | None,
    level: str,
    history: bool,
    json_output: bool,
) -> None:
    from hpcscope.serve.server import run_server
    from hpcscope.service.core import Service
    from hpcscope.service.settings import Settings
    from hpcscope.service.source_settings import (
        CaptureSection,
        DcgmSection,
        FalcoSection,
        IntegritySection,
        LustreJobStatsSection,
        NodeSection,
        SlurmSection,
        TetragonSection,
    )

    try:
        settings = Settings(
            store_path=store_path,
            topology_path=topology_path,
            host=host,
            port=port,
            anonymous_diagram=True,
            dcgm=DcgmSection(targets_path=twin_dir / "targets.json"),
            node=NodeSection(targets_path=twin_dir / "targets.json"),
            lustre_job_stats=LustreJobStatsSection(dir=_path(info, "lustre_dir")),
            # the twin's attacks in Falco's JSON, Tetragon's export (and the bpftrace sensor's)
            # and the integrity hook's records: one incident per vector every 10 minutes
            falco=FalcoSection(events_path=_path(info, "falco_events_path")),
            tetragon=TetragonSection(
                events_path=_path(info, "tetragon_events_path"),
                proc_root=_path(info, "tetragon_proc_root") or Path("/proc"),
            ),
            integrity=IntegritySection(spool_dir=_path(info, "integrity_dir")),
            # the training jobs' capture windows (Kineto traces): phases on the job pages
            capture=CaptureSection(spool_dir=_path(info, "capture_dir")),
            slurm=SlurmSection(url=str(info["slurmrestd_url"]), poll_seconds=scrape_interval),
            # notifications to the twin's chat webhook, idle allocations cancelled through its
            # slurmrestd after a warning: the notifications' audit fills as on a real site
            notify_webhook_url=str(info["webhook_url"]) if info.get("webhook_url") else None,
            notify_public_url=f"http://{host}:{port}",
            notify_cancel_enabled=bool(info.get("webhook_url")),
            notify_cancel_via="slurmrestd",
            scrape_interval_seconds=scrape_interval,
            rules_dir=rules_dir,  # the topology's datasets registered: DP-4 over job_stats
            **engine,
        )
        _announce(f"http://{host}:{port}", info, twin_dir, json_output=json_output)
        service = Service.open(settings)
        past = _history(service, state_dir / "history") if history else None

        try:
            run_server(
                service,
                duration_seconds=seconds,
                log_level="debug" if level == "debug" else "warning",  # uvicorn's start-up lines
                before_collection=past,
            )
        finally:
            service.close()
    finally:
        twin.terminate()
        try:
            twin.wait(timeout=10)
        except subprocess.TimeoutExpired:
            twin.kill()


def _dataset_rules(topology_path: Path, target: Path) -> Path | None:
    """The bundled rules with the topology's datasets registered (``datasets_root`` on its
    ``dataset_targets``, curated by vision), or None (the bundled rules) when it has no pool."""
    from hpcscope.model.topology import load_topology
    from hpcscope.service.alerts.rules import rules_with_datasets

    storage = load_topology(topology_path).storage
    pool = storage.get("dataset_targets") or []
    if not pool:
        return None
    return rules_with_datasets(target, [f"{storage['datasets_root']} vision {','.join(pool)}"])


def _path(info: dict[str, object], key: str) -> Path | None:
    """A path the twin announced in its run file, if any."""
    value = info.get(key)
    return Path(str(value)) if value else None


def _announce(url: str, info: dict[str, object], twin_dir: Path, *, json_output: bool) -> None:
    """The URL and the demo logins, first (the server answers a moment later)."""
    from hpcscope.service.identity.users import DEMO_LOGINS

    if json_output:
        print_json(
            {
                "url": url,
                "logins": [
                    {
                        "user": d.name,
                        "password": d.password,
                        "role": d.role.value,
                        "accounts": list(d.accounts),
                        "coordinates": list(d.coordinates),
                    }
                    for d in DEMO_LOGINS
                ],
                "twin": {
                    "slurmrestd_url": info["slurmrestd_url"],
                    "targets_file": str(twin_dir / "targets.json"),
                },
            }
        )
        return
    lines = [f"hpcscope demo: {url}", "", "Demo logins (user / password, role):"]
    lines += [
        f"  {d.name:<6} / {d.password:<11} {d.role.value}"
        + (f" of {', '.join(d.coordinates)}" if d.coordinates else "")
        + (f" (account {', '.join(d.accounts)})" if d.accounts and not d.coordinates else "")
        for d in DEMO_LOGINS
    ]
    lines += ["", "Twin: 2 nodes x 8 H100, one job per workload profile; Ctrl-C stops."]
    typer.echo("\n".join(lines))


def _history(service: Service, work_dir: Path) -> Callable[[Callable[[], bool]], object]:
    """What the server runs before it collects: the month before now, as the twin's
    collectors would have read it (twin/history.py), read by the collector's code
    (service/history.py)."""

    def write(stopping: Callable[[], bool]) -> None:
        from hpcscope.model.access import Principal, Role
        from hpcscope.model.timeutil import epoch_seconds, utcnow
        from hpcscope.service.history import write_history
        from hpcscope.service.notify.access import update_my_preferences
        from hpcscope.service.notify.contracts import PreferencesUpdate
        from hpcscope.service.notify.wiring import notifier_from_settings
        from hpcscope.twin.history import simulate_history

        end, step = utcnow(), 600.0
        clock = [end]  # the notifier runs at each day's end of the history, on its clock
        notifier = notifier_from_settings(service, now=lambda: clock[0])
        # grace turned chat notifications off a month ago (her failures: audited opted_out)
        update_my_preferences(
            service,
            Principal(name="grace", role=Role.RESEARCHER),
            PreferencesUpdate(webhook_enabled=False),
            now=end - timedelta(days=31),
        )

        def notify(at: datetime) -> None:
            clock[0] = at
            if notifier is not None:
                notifier.run_once()

        chunks = simulate_history(
            service.topology,
            work_dir / "twin",
            end=epoch_seconds(end),
            step_seconds=step,
            capture_dir=service.settings.capture.spool_dir,  # the live twin's spool too
        )
        report = write_history(
            service,
            chunks,
            work_dir / "read",
            end=end,
            step_seconds=step,
            after_chunk=notify,
            stopped=stopping,  # Ctrl-C while it is written: the demo stops within a day's chunk
        )
        if report.stopped:
            log.info("history stopped after %.1f s: the demo is stopping", report.seconds)
            return
        log.info(
            "history ready: 30 days, %d jobs, %d alerts, written in %.1f s; collecting live",
            report.jobs,
            report.alerts,
            report.seconds,
        )

    return write
