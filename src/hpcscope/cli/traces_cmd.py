"""``hpcscope traces analyze``: phases per rank and step, stragglers and what-if, from traces."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from hpcscope.cli.output import (
    EXIT_RUNTIME_ERROR,
    fail,
    print_json,
    print_table,
    stderr_console,
    stdout_console,
)
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
    from hpcscope.service.traces.kernel_classes import load_class_table
    from hpcscope.service.traces.pipeline import analyze, to_json

    try:
        classes = load_class_table(kernel_classes) if kernel_classes else None
    except SourceError as exc:
        fail(exc.describe(), code=EXIT_RUNTIME_ERROR, as_json=json_output, error=exc)
    progress = None
    if sys.stderr.isatty() and not json_output:
        from rich.progress import Progress

        bar = Progress(console=stderr_console(), transient=True)
        bar.start()
        task = bar.add_task("parsing ranks", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

    try:
        result = analyze(
            paths,
            threshold=threshold,
            workers=workers,
            world_size=world_size,
            progress=progress,
            classes=classes,
        )
    except SourceError as exc:
        fail(exc.describe(), code=EXIT_RUNTIME_ERROR, as_json=json_output, error=exc)
    finally:
        if progress is not None:
            bar.stop()
    _emit(to_json(result), json_output=json_output, html=html)


def _emit(document: dict[str, Any], *, json_output: bool, html: Path | None) -> None:
    """The analysis document: as JSON or tables, and the HTML report when asked for."""
    from hpcscope.service.traces.contracts import TraceAnalysisDocument

    # validated against the contract on every path (JSON, HTML, text)
    document = TraceAnalysisDocument.of(document).model_dump(mode="json", exclude_unset=True)
    if html is not None:
        from hpcscope.service.traces.html import render_report  # jinja2: only for --html

        try:
            html.write_text(render_report(document), encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {html}: {exc.strerror or exc}", as_json=json_output)
    if json_output:
        print_json(document)
        return
    _print_human(document)


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
        fail(exc.describe(), code=EXIT_RUNTIME_ERROR, as_json=json_output, error=exc)
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
    from hpcscope.service.traces.pipeline import to_json
    from hpcscope.service.traces.summaries import merge_summaries

    try:
        result = merge_summaries(paths, threshold=threshold, world_size=world_size)
    except SourceError as exc:
        fail(exc.describe(), code=EXIT_RUNTIME_ERROR, as_json=json_output, error=exc)
    _emit(to_json(result), json_output=json_output, html=html)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:,.2f}"


def _print_human(doc: dict[str, object]) -> None:
    from hpcscope.analysis.traces.rank_timeline import PHASES

    console = stdout_console()
    phases: dict[str, dict[str, float]] = doc["phases"]  # type: ignore[assignment]
    scores: dict[str, float] = doc["scores"]  # type: ignore[assignment]
    steps: dict[str, float] = doc["step_seconds"]  # type: ignore[assignment]
    rows = [
        [rank, _ms(steps[rank]), *[_ms(phases[rank][p]) for p in PHASES], f"{scores[rank]:.2f}"]
        for rank in phases
    ]
    columns = ["rank", "step ms", *[f"{p} ms" for p in PHASES], "score"]
    print_table(
        f"Mean milliseconds per step over {doc['steps']} steps (score: peers' median busy time "
        "/ this rank's; 1 = as fast as its peers, below 0.75 a straggler by default)",
        columns,
        rows,
        numeric=columns[1:],
    )
    stragglers: list[dict[str, object]] = doc["stragglers"]  # type: ignore[assignment]
    if not stragglers:
        console.print("No straggler: every rank's score is at or above the threshold.")
    for s in stragglers:
        phase_excess: dict[str, float] = s["phase_excess_seconds_per_step"]  # type: ignore[assignment]
        console.print(
            f"[bold]Straggler: rank {s['rank']}[/] is {_ms(s['excess_seconds_per_step'])} ms/step "  # type: ignore[arg-type]
            f"slower than its peers' median (score {s['score']}); slowest phase: {s['phase']} "
            f"(+{_ms(phase_excess[str(s['phase'])])} ms/step). Hint: {s['hint']}",
            highlight=False,
        )
        for item in s["evidence"]:  # type: ignore[attr-defined]
            console.print(f"  evidence: {item['summary']}", highlight=False)
    what: dict[str, float] = doc["what_if"]  # type: ignore[assignment]
    share = what["worst_rank_share"]
    console.print(
        f"What-if: actual step {_ms(what['actual_step_seconds'])} ms, ideal (every rank at its "
        f"peers' median busy time) {_ms(what['ideal_step_seconds'])} ms, slowdown "
        f"{what['slowdown']:.3f}x"
        + (
            f"; fixing rank {what['worst_rank']} alone removes {share * 100:.0f} % of it."
            if share is not None
            else "."
        )
    )
    for note in doc["notes"]:  # type: ignore[attr-defined]
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if doc["partial"]:
        console.print("[yellow]The result is partial (see the notes).[/]")
    _print_comm(doc.get("comm_classes"))


def _print_comm(section: object) -> None:
    """The communication classes: time, hidden, exposed, What-if gain; class stragglers and
    unclassified events."""
    if not isinstance(section, dict) or not section["classes"]:
        return
    console = stdout_console()
    rows = []
    for c in section["classes"]:
        ranks = c["seconds_per_step"]
        mean = sum(ranks.values()) / len(ranks)
        exposed = sum(c["exposed_seconds_per_step"].values()) / len(ranks)
        hidden = c["hidden_ratio"]
        gain = c["what_if_gain_ratio"]
        rows.append(
            [
                c["label"],
                _ms(mean),
                _ms(exposed),
                "-" if hidden is None else f"{hidden * 100:.0f} %",
                _ms(c["what_if_gain_seconds"]),
                "-" if gain is None else f"{gain * 100:.1f} %",
            ]
        )
    columns = ["class", "ms/step", "exposed ms", "hidden", "what-if gain ms", "gain"]
    print_table(
        "Communication by class (mean over ranks; hidden: under compute on other streams or "
        "threads; what-if: step time saved without the exposed part)",
        columns,
        rows,
        numeric=columns[1:],
    )
    for s in section["stragglers"]:
        console.print(
            f"[bold]{s['message']}[/]: the others wait {_ms(s['wait_seconds_per_step'])} ms/step",
            highlight=False,
        )
    unknown = section["unclassified"]
    if unknown:
        console.print(
            f"[yellow]{len(unknown)} unclassified event names[/] "
            f"({_ms(section['unclassified_seconds'])} ms in all), e.g. "
            + ", ".join(f"{u['name'][:60]} ({_ms(u['seconds'])} ms)" for u in unknown[:3]),
            highlight=False,
        )
