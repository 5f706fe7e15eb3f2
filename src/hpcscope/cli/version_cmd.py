"""``hpcscope version``: the installed version."""

from __future__ import annotations

import typer

from hpcscope import __version__
from hpcscope.cli.output import print_json


def register(app: typer.Typer) -> None:
    app.command("version")(version)


def version(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the hpcscope version."""
    if json_output:
        print_json({"version": __version__})
    else:
        typer.echo(f"hpcscope {__version__}")
