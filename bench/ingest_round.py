"""CPU per scrape round of the collector's ingest path, stage by stage, in one process.

    PYTHONPATH=src:. .venv/bin/python -m bench.ingest_round                 # 30 rounds
    PYTHONPATH=src:. .venv/bin/python -m bench.ingest_round --rounds 60 --profile out.prof

The load of ``bench/ingest_vs_prometheus.py`` (the twin's 128 dcgm-exporter pages of a 1,024-GPU
cluster, two ``hpc_job`` copies per GPU, in their own process) is scraped ``--rounds`` times
after ``--warmup`` rounds by the pieces of the collector's dcgm-exporter source
(``service/sources/dcgm.py``), one stage after the other (no overlap, no after-cycle hooks, no
web server), into a fresh store:

* ``fetch``: the HTTP GETs and the event loop (the scrape minus the parse);
* ``parse``: :meth:`ExpositionParser.parse` of the 128 pages;
* ``convert``: the source's per-page work (dcgm conversion, Xid facts, health, scrape rows);
* ``table``: :func:`readings_table` of the round;
* ``attribute``: :class:`ReadingsAttributor` (the jobs of every GPU row, as the collector);
* ``append``: the store's append of the readings and their rollup rows, and the scrapes rows.

Each figure is CPU milliseconds (``time.process_time``, all threads) per round, median over the
rounds. The CPU between rounds (the store's background threads) is not counted; the serve bench
is the end-to-end figure. The last line is one JSON object of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from bench.ingest_vs_prometheus import twin_load
from hpcscope.ingest.exporters.dcgm import readings_table
from hpcscope.ingest.exposition import parser as parser_module
from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.service.collect.attribution import ReadingsAttributor
from hpcscope.service.collect.clock import SystemClock
from hpcscope.service.sources._scrape import Round
from hpcscope.service.sources.dcgm import DcgmScrape
from hpcscope.store import Store

STAGES = ("fetch", "parse", "convert", "table", "attribute", "append")


class _ParseTimer:
    """Adds the CPU time of every :meth:`ExpositionParser.parse` call (the loop's thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._parse = parser_module.ExpositionParser.parse
        timer = self

        def timed(self: parser_module.ExpositionParser, text: str | bytes, *, source: str):  # type: ignore[no-untyped-def]
            start = time.thread_time()
            try:
                return timer._parse(self, text, source=source)
            finally:
                timer.seconds += time.thread_time() - start

        parser_module.ExpositionParser.parse = timed  # type: ignore[method-assign]


async def rounds(
    source: DcgmScrape, count: int, warmup: int, profile: cProfile.Profile | None
) -> dict[str, list[float]]:
    timer = _ParseTimer()
    figures: dict[str, list[float]] = {stage: [] for stage in STAGES}
    store = source.store
    attributor = ReadingsAttributor(store)
    for index in range(warmup + count):
        measured = index >= warmup
        if measured and profile is not None:
            profile.enable()
        timer.seconds = 0.0
        marks = [time.process_time()]
        targets = source.targets()
        results = await source.scraper.scrape(targets)
        marks.append(time.process_time())
        report = Round()
        for result in results:
            source.record(result, report)
        marks.append(time.process_time())
        conversions, source.conversions = source.conversions, []
        table = readings_table(conversions)
        marks.append(time.process_time())
        stored, _ = attributor.attribute(table)
        marks.append(time.process_time())
        store.append("gpu_samples", stored).result()
        store.append("scrapes", pa.Table.from_pylist(report.scrapes, schema=SCRAPE_SCHEMA)).result()
        if report.gaps:
            store.append("collection_gaps", pa.Table.from_pylist(report.gaps, schema=GAP_SCHEMA))
        store.flush()
        marks.append(time.process_time())
        if measured and profile is not None:
            profile.disable()
        if report.ok != len(targets):
            print(f"round {index}: {report.ok}/{len(targets)} ok {report.errors[:2]}")
        if measured:
            fetch_parse = marks[1] - marks[0]
            spent = [fetch_parse - timer.seconds, timer.seconds]
            spent += [b - a for a, b in itertools.pairwise(marks[1:])]
            for stage, seconds in zip(STAGES, spent, strict=True):
                figures[stage].append(seconds * 1000)
        await asyncio.sleep(max(0.0, 1.0 - (time.process_time() - marks[0])))
    await source.aclose()
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--jobs-per-gpu", type=int, default=2)
    parser.add_argument("--profile", help="write a cProfile of the measured rounds here")
    args = parser.parse_args(argv)
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="ingest-round-") as tmp:
        work = Path(tmp)
        (work / "load").mkdir()
        with twin_load(work / "load", nodes=args.nodes, jobs_per_gpu=args.jobs_per_gpu) as targets:
            store = Store(work / "store.duckdb")
            source = DcgmScrape(
                store,
                targets_path=targets,
                interval_seconds=1.0,
                timeout_seconds=1.0,
                clock=SystemClock(),
            )
            try:
                figures = asyncio.run(rounds(source, args.rounds, args.warmup, profile))
            finally:
                store.close()
    if profile is not None:
        profile.dump_stats(args.profile)
    medians = {f"{stage}_ms": round(statistics.median(figures[stage]), 2) for stage in STAGES}
    medians["total_ms"] = round(sum(medians.values()), 2)
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
