"""``hpcscope serve``: run the web server (and the collector) on an existing configuration."""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.output import EXIT_USAGE_ERROR, fail
from hpcscope.model.errors import SourceError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Settings file (YAML)."),
    host: str | None = typer.Option(None, help="Listen address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Listen port (default 8080)."),
    store: Path | None = typer.Option(None, help="DuckDB store file."),
    topology: Path | None = typer.Option(None, help="Cluster topology YAML."),
) -> None:
    """Serve the web UI and API on an existing store and topology."""
    import uvicorn

    from hpcscope.serve.app import create_app
    from hpcscope.service.core import Service
    from hpcscope.service.settings import load_settings

    try:
        settings = load_settings(
            config, host=host, port=port, store_path=store, topology_path=topology
        )
        service = Service.open(settings)
    except SourceError as exc:
        fail(exc.describe(), code=EXIT_USAGE_ERROR, error=exc)
    app = create_app(service, on_shutdown=service.close)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
