"""The newest samples are read once per scrape interval, and answered as of the copy's instant."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from urllib.parse import parse_qs

import httpx2
import pyarrow as pa

from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends import PrometheusSamples, engine_live
from hpcscope.service.backends.client import EngineClient, EngineConfig
from hpcscope.service.diagram.live import LIVE_COLUMNS

T0 = datetime(2026, 3, 1, 12, 0, 0)
URL = "http://prom:9090"
#: The twin's two GPUs: one busy with job 7, sampled every 15 s; one idle, silent since T0 - 90 s.
GPUS = (("gpu01", "0", "7"), ("gpu01", "1", ""))
NAMES = re.compile(r'__name__=~"([^"]+)"')


def _engine(asked: list[float]) -> httpx2.MockTransport:
    """An engine scraping every 15 s: as of a time ``at``, GPU 0's newest sample is the last
    multiple of 15 s and its values are that time's seconds past T0 (GPU 1: T0 - 90 s)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        form = parse_qs(request.content.decode())
        query, at = form["query"][0], float(form["time"][0])
        asked.append(at)
        result: list[dict[str, object]] = []
        for node, gpu, job in GPUS:
            stamp = at - at % 15 if job else epoch_seconds(T0) - 90
            key: dict[str, str] = {"node": node, "gpu": gpu}
            if job:
                key["hpc_job"] = job
            if "timestamp(" in query:
                result.append({"metric": key, "value": [at, str(stamp)]})
                continue
            found = NAMES.search(query)
            assert found is not None, query
            name = found.group(1).split("|")[0]
            value = str(stamp - epoch_seconds(T0)) if job else "0"
            result.append({"metric": {**key, "__name__": name}, "value": [at, value]})
        answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx2.Response(200, json=answer)

    return httpx2.MockTransport(handler)


def _reader(asked: list[float], clock: list[datetime]) -> PrometheusSamples:
    return PrometheusSamples(
        URL,
        step_seconds=15,
        lookback_seconds=86_400,
        now=lambda: clock[0],
        transport=_engine(asked),
    )


def _direct(
    asked: list[float], *, since: datetime, until: datetime, columns: tuple[str, ...]
) -> pa.Table:
    """What the engine answers as of ``until`` without a copy."""
    engine = EngineClient(EngineConfig(url=URL), transport=_engine(asked))
    try:
        return engine_live.latest(engine, since=since, until=until, columns=columns)
    finally:
        engine.close()


def test_pages_within_a_scrape_interval_share_one_read_as_of_its_instant() -> None:
    asked: list[float] = []
    clock = [T0 + timedelta(seconds=1)]
    reader = _reader(asked, clock)
    minute = timedelta(minutes=1)
    try:
        first = reader.latest(since=clock[0] - minute, until=clock[0], columns=LIVE_COLUMNS)
        reads = len(asked)
        assert reads >= 2 and first.num_rows == 1  # GPU 1 is silent since before ``since``
        # 10 s later, within the scrape interval: the copy, as of its instant
        clock[0] = T0 + timedelta(seconds=11)
        again = reader.latest(since=clock[0] - minute, until=clock[0], columns=LIVE_COLUMNS)
        assert len(asked) == reads and again.equals(first)
        assert reader.newest.instant == T0 + timedelta(seconds=1)
        # the engine would answer the same as of the copy's instant: compared there
        at_copy = _direct(
            [], since=clock[0] - minute, until=T0 + timedelta(seconds=1), columns=LIVE_COLUMNS
        )
        assert again.equals(at_copy)
        # one interval after the copy's instant: read again, and the new sample shows
        clock[0] = T0 + timedelta(seconds=16)
        later = reader.latest(since=clock[0] - minute, until=clock[0], columns=LIVE_COLUMNS)
        assert len(asked) == 2 * reads
        assert later["sm_active_ratio"].to_pylist() == [15.0]
    finally:
        reader.close()


def test_a_past_instant_or_an_old_copy_is_read_again() -> None:
    asked: list[float] = []
    clock = [T0 + timedelta(seconds=20)]
    reader = _reader(asked, clock)
    minute = timedelta(minutes=1)
    try:
        reader.latest(since=clock[0] - minute, until=clock[0], columns=LIVE_COLUMNS)
        reads = len(asked)
        # an instant before the copy's: never answered with samples after it
        past = reader.latest(since=T0 - minute, until=T0 + timedelta(seconds=5))
        assert len(asked) > reads and set(asked[reads:]) == {epoch_seconds(T0) + 5}
        assert past["sm_active_ratio"].to_pylist() == [0.0]
        assert reader.newest.instant == T0 + timedelta(seconds=5)
        # the same instant asked again once the copy is an interval old by the clock
        clock[0] = T0 + timedelta(seconds=35)
        before = len(asked)
        reader.latest(since=T0 - minute, until=T0 + timedelta(seconds=5))
        assert len(asked) > before
    finally:
        reader.close()


def test_a_copy_answers_fewer_columns_and_a_later_since_as_the_engine_would() -> None:
    asked: list[float] = []
    clock = [T0 + timedelta(seconds=3)]
    reader = _reader(asked, clock)
    try:
        reader.latest(since=T0 - timedelta(minutes=5), until=clock[0], columns=LIVE_COLUMNS)
        reads = len(asked)
        for since in (T0 - timedelta(minutes=5), T0 - timedelta(seconds=60)):
            for columns in (LIVE_COLUMNS, ("sm_active_ratio", "power_watts")):
                kept = reader.latest(since=since, until=clock[0], columns=columns)
                direct = _direct([], since=since, until=clock[0], columns=columns)
                assert kept.equals(direct), (since, columns)
        assert len(asked) == reads
        # both GPUs within five minutes, the busy one only within one
        assert reader.latest(since=T0 - timedelta(minutes=5), until=clock[0]).num_rows == 2
        assert len(asked) > reads  # every column: more than the copy holds
    finally:
        reader.close()
