"""Running the web app for real: uvicorn, the collector in the lifespan, optional time limit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

from hpcscope.serve.app import create_app
from hpcscope.serve.heap import HeapSettler, tune_gc
from hpcscope.serve.http_writes import OneWriteProtocol
from hpcscope.serve.job_view import ViewKeeper
from hpcscope.serve.kept import AheadKeeper
from hpcscope.service.backends.watch import EngineWatch
from hpcscope.service.collect.collector import Collector, CollectorConfig
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import read_owners
from hpcscope.service.notify.engine import Notifier
from hpcscope.service.notify.wiring import notifier_from_settings
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.settings import Settings
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.engine import SloUpkeep
from hpcscope.service.sources import SourceContext, build_sources
from hpcscope.service.telemetry_rules.engine import TelemetryRules
from hpcscope.service.telemetry_rules.engine import port_gpus as telemetry_port_gpus

log = logging.getLogger(__name__)


def base_url_scheme(settings: Settings) -> str:
    """``https`` when the server speaks TLS itself, else ``http``."""
    return "https" if settings.tls_certfile is not None else "http"


def uvicorn_config(
    app: FastAPI, settings: Settings, *, log_level: str = "warning"
) -> uvicorn.Config:
    """How uvicorn serves the app: address, TLS, and no proxy-header trust of its own.

    Forwarded headers are judged by :class:`hpcscope.serve.edge.EdgeMiddleware` against
    ``trusted_proxies`` (uvicorn would believe 127.0.0.1 by default); TLS uses the
    certificate and key files of the settings.
    """
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        # logging is configured once for the process (cli/logs.py), not by uvicorn; its
        # access log is one line per request: only when debugging
        log_config=None,
        access_log=log_level == "debug",
        lifespan="on",
        http=OneWriteProtocol,  # a response's head and body in one write (serve/http_writes.py)
        proxy_headers=False,
        server_header=False,
        ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
        ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
    )


#: A report kept ahead is recomputed this long, plus a cycle, before it is due.
AHEAD_MARGIN_SECONDS = 5.0


def after_cycle_hooks(
    service: Service, notifier: Notifier | None = None
) -> list[Callable[[], object]]:
    """What the collector runs after its cycles, in order: the jobs upkeep (summaries of
    finished jobs, retention), the finished jobs' stored time series and page parts and the
    reports kept ahead (each on a thread of its own), the telemetry rules (RD-, SC-4, GM-1/2,
    DP-), the SLOs' burn-rate evaluation into the alert engine (it reads the summaries just
    written), then
    the notifications (they read all of it), and last the publication of the cycle's writes
    to the read snapshots (``service/snapshots.py``)."""
    slo = SloUpkeep(service.store, SloConfig.from_settings(service.settings))
    telemetry = TelemetryRules(
        service.store,
        service.rules,
        port_gpus=telemetry_port_gpus(service.topology),
        every_seconds=service.settings.telemetry_rules_every_seconds,
        metrics=service.gpu_samples(),
    )  # the telemetry rules (RD-, SC-4, GM-1/2, DP-; service/telemetry_rules/engine.py)
    views = ViewKeeper(service)  # finished jobs' page parts, on a thread of their own
    service.at_close(views.stop)
    # the reports read with ``ahead`` (the SLOs), recomputed before they are due
    lead = service.settings.scrape_interval_seconds + AHEAD_MARGIN_SECONDS
    ahead = AheadKeeper(service.snapshots, lead_seconds=lead)
    service.at_close(ahead.stop)
    hooks: list[Callable[[], object]] = [
        service.upkeep().after_cycle,
        service.document_keeper().after_cycle,
        views.after_cycle,
        ahead.after_cycle,
        telemetry.after_cycle,
        slo.after_cycle,
    ]
    engine = service.engine()
    if engine is not None:  # an engine that does not answer raises OPS-1 (backends/watch.py)
        silence = (
            2 * service.settings.scrape_interval_seconds + service.settings.scrape_timeout_seconds
        )
        hooks.insert(0, EngineWatch(service.store, engine, silence_seconds=silence).after_cycle)
    if notifier is not None:
        hooks.append(notifier.after_cycle)
    # the owners of the jobs with alerts, read here rather than by the next read of the open
    # counts, which is on the event loop (service/diagram/alert_counts.py)

    def alert_owners() -> None:
        read_owners(service)

    hooks.append(alert_owners)
    hooks.append(service.snapshots.publish)  # last: the cycle's writes are one generation
    return hooks


def run_server(
    service: Service,
    *,
    duration_seconds: float | None = None,
    on_ready: Callable[[str], None] | None = None,
    log_level: str = "warning",
    before_collection: Callable[[Callable[[], bool]], object] | None = None,
) -> None:
    """Serve until interrupted (or for ``duration_seconds``), collecting in the background.

    ``log_level`` is uvicorn's own (start-up lines at ``info``, one line per request at
    ``debug``). The collector starts in the app's lifespan and stops before the store closes,
    so queued writes are flushed and no data is lost on a clean stop. ``before_collection``
    (the demo's history) runs on a thread of its own once the server serves, given whether the
    server is stopping (a stop waits for it to return: it should return soon once told); the
    collector starts when it returns (or fails: logged), so that nothing it writes races
    collection.
    """
    # the Falco/Tetragon tails and POST /api/ingest/falco fill it, the alert engine drains it
    buffer = SecurityEventBuffer(max_rows=service.settings.security_events.buffer_rows)
    sources = build_sources(
        SourceContext(
            service.store,
            service.settings,
            service.rules,
            service.topology,
            security_buffer=buffer,
        )
    )  # the registry's sources this site's settings switch on (service/sources/)
    notifier = notifier_from_settings(service)  # a bad rules file stops the start
    # the long-lived heap out of the full collections: at start and once the first
    # cycles' caches are built (serve/heap.py)
    settler = HeapSettler()
    collector = (
        Collector(
            service.store,
            sources,
            config=CollectorConfig.from_settings(service.settings),
            after_cycle=[*after_cycle_hooks(service, notifier), settler.after_cycle],
        )
        if sources
        else None
    )

    def prepare_then_collect() -> None:
        try:
            if before_collection is not None:
                before_collection(stopping.is_set)
        except Exception:  # the server goes on serving and collecting without it
            log.exception("before collection: failed")
        if collector is not None and not stopping.is_set():
            collector.start()

    stopping = threading.Event()
    preparing = threading.Thread(target=prepare_then_collect, name="prepare", daemon=True)

    def startup() -> None:
        tune_gc()  # start-up done (the app's lifespan): settle the heap once, young threshold
        if before_collection is None:
            if collector is not None:
                collector.start()
            return
        preparing.start()

    def shutdown() -> None:
        stopping.set()
        if before_collection is not None and preparing.is_alive():
            preparing.join()  # its writes land before the store closes
        if collector is not None:
            collector.stop()
            collector.close_open_gaps()
        service.store.flush()

    app = create_app(service, on_startup=startup, on_shutdown=shutdown)
    app.state.collector = collector
    app.state.security_events = buffer  # POST /api/ingest/falco fills what the engine drains
    server = uvicorn.Server(uvicorn_config(app, service.settings, log_level=log_level))
    timer: threading.Timer | None = None
    if duration_seconds is not None:
        timer = threading.Timer(duration_seconds, lambda: setattr(server, "should_exit", True))
        timer.daemon = True
        timer.start()
    if on_ready is not None:

        def announce() -> None:
            while not server.started and not server.should_exit:
                threading.Event().wait(0.05)
            if server.started:
                settings = service.settings
                port = _bound_port(server, settings.port)
                on_ready(f"{base_url_scheme(settings)}://{settings.host}:{port}")

        threading.Thread(target=announce, name="announce", daemon=True).start()
    try:
        server.run()
    finally:
        if timer is not None:
            timer.cancel()


def _bound_port(server: uvicorn.Server, configured: int) -> int:
    """The port the server listens on: the kernel's choice when ``configured`` is 0."""
    for listener in getattr(server, "servers", ()):
        for sock in listener.sockets:
            return int(sock.getsockname()[1])
    return configured
