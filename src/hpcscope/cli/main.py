"""The ``hpcscope`` command: one Typer app, sub-commands registered from their modules."""

from __future__ import annotations

import os
from typing import Any

import typer
from typer.core import TyperGroup

from hpcscope import __version__
from hpcscope.cli import (
    alerts_cmd,
    demo_cmd,
    deploy_cmd,
    jobs_cmd,
    nccl_cmd,
    serve_cmd,
    simulate_cmd,
    traces_cmd,
    twin_cmd,
)
from hpcscope.cli.logs import LOG_LEVELS, configure_logging
from hpcscope.cli.output import print_json, report_error
from hpcscope.model.errors import HpcscopeError


class _Commands(TyperGroup):
    """The command group, with the one handler for errors no command handled itself.

    An :class:`HpcscopeError` becomes one line on stderr and exit code 1 (runtime) or 2 (bad
    input), never a traceback; other exceptions are bugs and keep their traceback.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # the error is a JSON document on stdout when the command was asked for JSON
        ctx.meta["hpcscope.json"] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except HpcscopeError as exc:
            report_error(exc, as_json=bool(ctx.meta.get("hpcscope.json")))


app = typer.Typer(
    cls=_Commands,
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
alerts_cmd.register(app)
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
    level = os.environ.get("HPCSCOPE_LOG_LEVEL", "info")
    configure_logging(level if level.lower() in LOG_LEVELS else "info")
    app()
