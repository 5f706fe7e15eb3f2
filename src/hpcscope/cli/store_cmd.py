"""``hpcscope store upkeep``: write the kept job summaries and run the retention pass now.

The collector runs the same pass by itself (first cycle, then once per
``upkeep_every_cycles``); this command runs it on a store file that no server holds (DuckDB
lets one process open a file for writing), for an operator after an upgrade or before a backup.
"""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.output import print_json, stdout_console
from hpcscope.model.timeutil import utcnow
from hpcscope.service.jobs.retention import UpkeepConfig, run_upkeep_on_file
from hpcscope.service.settings import Settings

app = typer.Typer(help="Maintain the store file offline.", no_args_is_help=True)

_DEFAULTS = Settings()


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="store")


@app.command("upkeep")
def upkeep(
    store: Path = typer.Option(..., "--store", help="The store file (no server may hold it)."),
    raw_retention_days: float = typer.Option(
        _DEFAULTS.raw_retention_days, help="Days raw samples of summarised jobs are kept."
    ),
    rollup_retention_days: float = typer.Option(
        _DEFAULTS.rollup_retention_days, help="Days final 1-minute rollups are kept."
    ),
    scrape_interval_seconds: float = typer.Option(
        _DEFAULTS.scrape_interval_seconds, help="The collector's scrape interval."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Summarise finished jobs, then drop raw samples and rollups past their retention."""
    config = UpkeepConfig(
        raw_retention_days=raw_retention_days,
        rollup_retention_days=rollup_retention_days,
        rollup_grace_seconds=_DEFAULTS.rollup_grace_seconds,
    )
    done = run_upkeep_on_file(
        store, config, now=utcnow(), scrape_interval_seconds=scrape_interval_seconds
    )
    data = {
        "summaries_written": done.summaries_written,
        "raw_samples_deleted": done.raw_samples_deleted,
        "rollup_rows_deleted": done.rollup_rows_deleted,
    }
    if json_output:
        print_json(data)
        return
    stdout_console().print(
        f"{done.summaries_written} job summaries written, {done.raw_samples_deleted} raw "
        f"samples and {done.rollup_rows_deleted} rollup rows dropped",
        highlight=False,
    )
