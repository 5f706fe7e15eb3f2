"""``hpcscope serve``: run the web server and the collector on a configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.durations import parse_duration
from hpcscope.cli.logs import configure_logging, log_level_or_default
from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json
from hpcscope.model.errors import HpcscopeError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Settings file (YAML)."),
    host: str | None = typer.Option(None, help="Listen address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Listen port (default 8080)."),
    store: Path | None = typer.Option(None, help="DuckDB store file."),
    topology: Path | None = typer.Option(None, help="Cluster topology YAML."),
    targets: Path | None = typer.Option(None, help="Prometheus file_sd targets to scrape."),
    slurmrestd_url: str | None = typer.Option(None, help="slurmrestd base URL."),
    scrape_interval: float | None = typer.Option(None, help="Seconds between scrapes."),
    tls_certfile: Path | None = typer.Option(
        None, help="PEM certificate: serve HTTPS (with --tls-keyfile)."
    ),
    tls_keyfile: Path | None = typer.Option(None, help="PEM private key of --tls-certfile."),
    duration: str | None = typer.Option(None, "--for", help="Stop after this long (60s, 5m)."),
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
        False, "--json", help='When ready, print {"url": ...} as JSON on stdout.'
    ),
) -> None:
    """Serve the web UI and API; collect from the configured targets and scheduler."""
    level = log_level_or_default(log_level)
    configure_logging(level, log_format)
    from hpcscope.serve.allocator import tune_allocator

    tune_allocator()  # before Service.open starts the store's writer (serve/allocator.py)
    from hpcscope.serve.server import run_server
    from hpcscope.service.core import Service
    from hpcscope.service.settings import load_settings

    try:
        seconds = parse_duration(duration) if duration else None
        settings = load_settings(
            config,
            host=host,
            port=port,
            store_path=store,
            topology_path=topology,
            targets_path=targets,
            slurmrestd_url=slurmrestd_url,
            scrape_interval_seconds=scrape_interval,
            tls_certfile=tls_certfile,
            tls_keyfile=tls_keyfile,
        )
        service = Service.open(settings)
    except ValueError as exc:
        if isinstance(exc, HpcscopeError):
            raise  # the CLI's one handler prints it (hpcscope: file:line:col: message)
        fail(str(exc), code=EXIT_USAGE_ERROR)
    try:

        def ready(url: str) -> None:
            if json_output:
                print_json({"url": url})
            else:
                typer.echo(f"hpcscope serving on {url}", err=True)

        run_server(service, duration_seconds=seconds, on_ready=ready, log_level=level)
    finally:
        service.close()
