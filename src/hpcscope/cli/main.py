"""The ``hpcscope`` command: one Typer app, sub-commands registered from their modules."""

from __future__ import annotations

import logging
import os

import typer

from hpcscope import __version__
from hpcscope.cli import (
    demo_cmd,
    deploy_cmd,
    jobs_cmd,
    nccl_cmd,
    serve_cmd,
    simulate_cmd,
    traces_cmd,
    twin_cmd,
)
from hpcscope.cli.output import print_json

app = typer.Typer(
    name="hpcscope",
    help="Observability and security for HPC clusters that train AI models: which job, which "
    "GPU, which phase, and what it costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

serve_cmd.register(app)
demo_cmd.register(app)
twin_cmd.register(app)
jobs_cmd.register(app)
simulate_cmd.register(app)
nccl_cmd.register(app)
traces_cmd.register(app)
deploy_cmd.register(app)


@app.command()
def version(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the hpcscope version."""
    if json_output:
        print_json({"version": __version__})
    else:
        typer.echo(f"hpcscope {__version__}")


def main() -> None:
    """Entry point of the ``hpcscope`` script."""
    logging.basicConfig(
        level=os.environ.get("HPCSCOPE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app()
