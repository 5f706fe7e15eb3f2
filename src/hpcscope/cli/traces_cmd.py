"""``hpcscope traces analyze``: phases per rank and step, stragglers and what-if, from traces.

The commands' bodies are in :mod:`hpcscope.cli.traces_run` (no Typer there), which
:mod:`hpcscope.cli.fast_path` also calls for an ordinary command line.
"""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.output import fail, print_json, read_error_code
from hpcscope.model.errors import SourceError

traces_app = typer.Typer(help="PyTorch profiler (Kineto) traces: steps, phases, stragglers.")


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")


@traces_app.command("analyze")
def analyze_command(
    paths: list[Path] = typer.Argument(
        ...,
        exists=True,
        help="Per-rank trace files (.json, .json.gz), directories or tar archives.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the JSON document."),
    html: Path | None = typer.Option(
        None, "--html", dir_okay=False, help="Also write a self-contained HTML report here."
    ),
    threshold: float = typer.Option(
        0.75, min=0.0, max=1.0, help="Straggler score threshold (NVRx default 0.75)."
    ),
    workers: int | None = typer.Option(None, min=1, help="Parallel parsers (default: CPUs)."),
    world_size: int | None = typer.Option(
        None, min=1, help="Ranks the job had (default: distributedInfo.world_size)."
    ),
    kernel_classes: list[Path] = typer.Option(
        [],
        "--kernel-classes",
        exists=True,
        dir_okay=False,
        help="A site's kernel class file, before deploy/kernels/classes.yaml (repeatable).",
    ),
) -> None:
    """Seconds per phase for every rank and step; the straggler, its phase, and what-if.

    Exit 0 with a result (a partial one says so), 1 when the traces cannot be analysed (the
    file and position are named), 2 for a usage error (a path that does not exist).
    """
    from hpcscope.cli.traces_run import run_analyze

    run_analyze(
        paths,
        json_output=json_output,
        html=html,
        threshold=threshold,
        workers=workers,
        world_size=world_size,
        kernel_classes=kernel_classes,
    )


@traces_app.command("summarize")
def summarize_command(
    paths: list[Path] = typer.Argument(
        ...,
        exists=True,
        help="Per-rank trace files (.json, .json.gz), directories or tar archives.",
    ),
    out: Path = typer.Option(..., "--out", file_okay=False, help="Directory to write into."),
    workers: int | None = typer.Option(None, min=1, help="Parallel parsers (default: CPUs)."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write one small summary per rank and window, for `traces merge` elsewhere.

    Run it where the traces are written (the job's epilog, or a step of the job) and ship the
    summaries (about 1 % of the JSON) instead of the traces. Exit 1 when a trace cannot be
    read (the file and position are named).
    """
    from hpcscope.service.traces.summaries import summarize_traces

    try:
        written = summarize_traces(paths, out, workers=workers)
    except SourceError as exc:
        fail(exc.describe(), code=read_error_code(exc), as_json=json_output, error=exc)
    if json_output:
        print_json({"summaries": [str(p) for p in written]})
        return
    for path in written:
        typer.echo(str(path))


@traces_app.command("merge")
def merge_command(
    paths: list[Path] = typer.Argument(
        ..., exists=True, help="Summary files (.hpcsum) or directories of them, one per rank."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the JSON document."),
    html: Path | None = typer.Option(
        None, "--html", dir_okay=False, help="Also write a self-contained HTML report here."
    ),
    threshold: float = typer.Option(
        0.75, min=0.0, max=1.0, help="Straggler score threshold (NVRx default 0.75)."
    ),
    world_size: int | None = typer.Option(
        None, min=1, help="Ranks the job had (default: distributedInfo.world_size)."
    ),
) -> None:
    """The analysis of per-rank summaries: the same result as `traces analyze` on the traces.

    Exit 0 with a result, 1 when a summary cannot be read or is of another version (the file
    is named), 2 for a usage error.
    """
    from hpcscope.cli.traces_run import run_merge

    run_merge(paths, json_output=json_output, html=html, threshold=threshold, world_size=world_size)
