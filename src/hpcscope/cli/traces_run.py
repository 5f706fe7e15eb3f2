"""What ``hpcscope traces analyze`` and ``traces merge`` do once their arguments are parsed.

No Typer here: :mod:`hpcscope.cli.traces_cmd` declares the commands for Typer, and
:mod:`hpcscope.cli.fast_path` runs an ordinary ``traces analyze``/``traces merge`` command
line without it (``docs/benchmarks.md``, start-up); both call these functions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hpcscope.cli.output import (
    fail,
    print_json,
    print_table,
    read_error_code,
    stderr_console,
    stdout_console,
)
from hpcscope.model.errors import SourceError

if TYPE_CHECKING:
    from hpcscope.service.traces.document import AnalysisJson, CommClassesJson


def run_analyze(
    paths: list[Path],
    *,
    json_output: bool,
    html: Path | None,
    threshold: float,
    workers: int | None,
    world_size: int | None,
    kernel_classes: list[Path],
) -> None:
    """``traces analyze``: parse, analyse and print (exits through :func:`fail` on error)."""
    from hpcscope.service.traces.kernel_classes import load_class_table
    from hpcscope.service.traces.pipeline import analyze, to_json

    try:
        classes = load_class_table(kernel_classes) if kernel_classes else None
    except SourceError as exc:
        fail(exc.describe(), code=read_error_code(exc), as_json=json_output, error=exc)
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
        fail(exc.describe(), code=read_error_code(exc), as_json=json_output, error=exc)
    finally:
        if progress is not None:
            bar.stop()
    _emit(to_json(result), json_output=json_output, html=html)


def run_merge(
    paths: list[Path],
    *,
    json_output: bool,
    html: Path | None,
    threshold: float,
    world_size: int | None,
) -> None:
    """``traces merge``: merge per-rank summaries, analyse and print."""
    from hpcscope.service.traces.pipeline import to_json
    from hpcscope.service.traces.summaries import merge_summaries

    try:
        result = merge_summaries(paths, threshold=threshold, world_size=world_size)
    except SourceError as exc:
        fail(exc.describe(), code=read_error_code(exc), as_json=json_output, error=exc)
    _emit(to_json(result), json_output=json_output, html=html)


def _emit(document: AnalysisJson, *, json_output: bool, html: Path | None) -> None:
    """The analysis document: as JSON or tables, and the HTML report when asked for.

    ``document`` is :func:`~hpcscope.service.traces.pipeline.to_json`'s dict, printed as it is:
    it is :class:`~hpcscope.service.traces.contracts.TraceAnalysisDocument`'s dump, byte for
    byte (``tests/cli/test_fast_path.py`` validates the documents of the fixture sets and
    compares), and validating it here would import pydantic and build the contract's models
    on every run (~0.1 s of CPU, ``docs/benchmarks.md``). ``/api/traces`` validates.
    """
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


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:,.2f}"


def _print_human(doc: AnalysisJson) -> None:
    from hpcscope.service.traces.pipeline import PHASES

    console = stdout_console()
    phases, scores, steps = doc["phases"], doc["scores"], doc["step_seconds"]
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
    stragglers = doc["stragglers"]
    if not stragglers:
        console.print("No straggler: every rank's score is at or above the threshold.")
    for s in stragglers:
        phase_excess = s["phase_excess_seconds_per_step"]
        console.print(
            f"[bold]Straggler: rank {s['rank']}[/] is {_ms(s['excess_seconds_per_step'])} ms/step "
            f"slower than its peers' median (score {s['score']}); slowest phase: {s['phase']} "
            f"(+{_ms(phase_excess[str(s['phase'])])} ms/step). Hint: {s['hint']}",
            highlight=False,
        )
        for item in s["evidence"]:
            console.print(f"  evidence: {item['summary']}", highlight=False)
    what = doc["what_if"]
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
    for note in doc["notes"]:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if doc["partial"]:
        console.print("[yellow]The result is partial (see the notes).[/]")
    _print_comm(doc.get("comm_classes"))


def _print_comm(section: CommClassesJson | None) -> None:
    """The communication classes: time, hidden, exposed, What-if gain; class stragglers and
    unclassified events."""
    if section is None or not section["classes"]:
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
