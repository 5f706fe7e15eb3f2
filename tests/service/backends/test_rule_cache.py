"""A rule read is answered again from what was kept only while it holds the same evaluations."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import parse_qs

import httpx2
import pyarrow as pa

from hpcscope.analysis.jobs.aggregates import VERDICT_COLUMNS
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends import PrometheusSamples
from hpcscope.service.backends.rule_cache import SETTLED_SECONDS, RuleAnswers, Window

T0 = datetime(2026, 3, 1, 12, 0, 0)
JOB = "4410001"
PROBE = "max(timestamp("
#: The engine's rule evaluations (epoch seconds): every 60 s, at 7 s past the minute.
EVALUATIONS = [epoch_seconds(T0) - 3600 + 7 + 60 * k for k in range(120)]


def _engine(
    asked: list[str], evaluations: Callable[[], list[float]], probes: list[str]
) -> httpx2.MockTransport:
    """An engine whose rules were evaluated at ``evaluations()``: a probe answers the newest at
    or before the query time, a column one value per GPU, the count of evaluations held."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        form = parse_qs(request.content.decode())
        query, at = form["query"][0], float(form["time"][0])
        held = [e for e in evaluations() if e <= at]
        if query.startswith(PROBE):
            probes.append(query)
            result = [{"metric": {}, "value": [at, str(held[-1])]}] if held else []
        else:
            asked.append(query)
            span = float(query.split("[")[1].split("s]")[0].split(":")[0])
            value = sum(1 for e in held if e >= at - span)
            result = [
                {
                    "metric": {"hpc_job": JOB, "node": "gpu01", "gpu": str(gpu)},
                    "value": [at, str(value)],
                }
                for gpu in (0, 1)
            ]
        answer = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx2.Response(200, json=answer)

    return httpx2.MockTransport(handler)


def _reader(
    asked: list[str],
    clock: list[datetime],
    evaluations: Callable[[], list[float]] | None = None,
    *,
    probes: list[str] | None = None,
) -> PrometheusSamples:
    return PrometheusSamples(
        "http://prom:9090",
        step_seconds=15,
        lookback_seconds=86_400,
        recording_rules="always",
        now=lambda: clock[0],
        transport=_engine(
            asked, evaluations or (lambda: EVALUATIONS), probes if probes is not None else []
        ),
    )


def _observed(reader: PrometheusSamples, *, since: datetime, until: datetime) -> list[float]:
    read = reader.job_gpus([JOB], since=since, until=until, columns=VERDICT_COLUMNS)
    assert read.aggregates is not None
    return list(read.aggregates["observed_seconds"].to_pylist())


def test_a_life_read_is_kept_until_the_next_evaluation() -> None:
    asked: list[str] = []
    clock = [T0 + timedelta(seconds=30)]
    reader = _reader(asked, clock)
    start = T0 - timedelta(minutes=30)
    try:
        # the window ends at until + 15 s: T0 + 15 s holds the evaluation at T0 + 7 s
        first = _observed(reader, since=start, until=T0)
        assert len(asked) == len(VERDICT_COLUMNS)
        # 20 s later it ends at T0 + 35 s, before the next one (T0 + 67 s): the same answer
        again = _observed(reader, since=start, until=T0 + timedelta(seconds=20))
        assert again == first and len(asked) == len(VERDICT_COLUMNS)
        # 80 s later the next one is in the window: read again, and it counts
        clock[0] = T0 + timedelta(seconds=110)
        later = _observed(reader, since=start, until=T0 + timedelta(seconds=80))
        assert len(asked) == 2 * len(VERDICT_COLUMNS)
        assert later[0] == first[0] + 1
    finally:
        reader.close()
    assert reader.rules.answers.hits == 1


def test_a_sliding_window_is_read_again_when_its_evaluations_change() -> None:
    asked: list[str] = []
    clock = [T0 + timedelta(seconds=30)]
    reader = _reader(asked, clock)
    five = timedelta(minutes=5)
    try:
        # [T0 - 285 s, T0 + 15 s] and [T0 - 275 s, T0 + 25 s] hold the same five evaluations
        _observed(reader, since=T0 - five, until=T0)
        shifted = T0 + timedelta(seconds=10)
        _observed(reader, since=shifted - five, until=shifted)
        assert len(asked) == len(VERDICT_COLUMNS)
        # [T0 - 225 s, T0 + 75 s]: the one at T0 - 233 s left, the one at T0 + 67 s came
        moved = T0 + timedelta(seconds=60)
        clock[0] = moved + timedelta(seconds=30)
        kept = _observed(reader, since=moved - five, until=moved)
        assert len(asked) == 2 * len(VERDICT_COLUMNS)
    finally:
        reader.close()
    fresh = _reader([], clock)
    try:
        assert kept == _observed(fresh, since=moved - five, until=moved)
    finally:
        fresh.close()


def test_an_evaluation_too_recent_is_kept_one_scrape_interval_only() -> None:
    asked: list[str] = []
    newest = EVALUATIONS[60]  # T0 + 7 s
    clock = [T0 + timedelta(seconds=7 + SETTLED_SECONDS - 1)]
    reader = _reader(asked, clock)
    start = T0 - timedelta(minutes=30)
    until = clock[0]
    try:
        assert epoch_seconds(clock[0]) - newest < SETTLED_SECONDS
        # its other rules may not be written yet: kept no longer than one scrape (15 s)
        _observed(reader, since=start, until=until)
        clock[0] += timedelta(seconds=14)
        _observed(reader, since=start, until=until)
        assert len(asked) == len(VERDICT_COLUMNS)
        clock[0] += timedelta(seconds=1)
        _observed(reader, since=start, until=until)
        assert len(asked) == 2 * len(VERDICT_COLUMNS)
    finally:
        reader.close()


def test_without_a_scrape_interval_an_unsettled_answer_is_not_kept() -> None:
    answers = RuleAnswers()
    table = _Table()
    window = Window(before=None, newest=1_000.0, start=0.0)
    for _ in range(2):
        answers.read("q", window, table, clock=lambda: 1_005.0, interval_seconds=60)
    assert len(table.made) == 2


def test_an_evaluation_written_after_a_read_is_read() -> None:
    asked: list[str] = []
    written = EVALUATIONS[:60]  # up to T0 - 53 s; the one at T0 + 7 s comes later
    clock = [T0 + timedelta(seconds=10)]
    reader = _reader(asked, clock, lambda: written)
    try:
        until = T0 + timedelta(seconds=10)
        first = _observed(reader, since=T0 - timedelta(minutes=30), until=until)
        written.append(EVALUATIONS[60])
        again = _observed(reader, since=T0 - timedelta(minutes=30), until=until)
    finally:
        reader.close()
    assert len(asked) == 2 * len(VERDICT_COLUMNS) and again[0] == first[0] + 1


def test_windows_without_an_evaluation_before_them_must_start_close() -> None:
    answers = RuleAnswers()
    table = _Table()

    def read(before: float | None, start: float) -> pa.Table:
        window = Window(before=before, newest=1_000.0, start=start)
        return answers.read("q", window, table, clock=lambda: 1_020.0, interval_seconds=60)

    assert read(None, 0.0) is table.made[0]
    assert read(None, 50.0) is table.made[0]
    read(None, 70.0)
    assert len(table.made) == 2
    # an evaluation at the start itself is held on one engine and not on another: its own key
    read(50.0, 50.0)
    read(50.0, 60.0)
    assert len(table.made) == 4


def test_an_answer_read_when_the_next_evaluation_may_be_written_is_not_kept() -> None:
    answers = RuleAnswers()
    table = _Table()
    window = Window(before=None, newest=1_000.0, start=0.0)
    ticks = iter([1_050.0, 1_056.0])  # started 50 s after it, ended 4 s before the next one
    answers.read("q", window, table, clock=lambda: next(ticks), interval_seconds=60)
    ticks = iter([1_016.0, 1_030.0])
    answers.read("q", window, table, clock=lambda: next(ticks), interval_seconds=60)
    answers.read("q", window, table, clock=lambda: 1_030.0, interval_seconds=60)
    assert len(table.made) == 2


class _Table:
    """A computation of a table, counted."""

    def __init__(self) -> None:
        self.made: list[pa.Table] = []

    def __call__(self) -> pa.Table:
        self.made.append(pa.table({"made": [len(self.made)]}))
        return self.made[-1]


def test_a_read_within_the_minute_asks_the_engine_nothing() -> None:
    asked: list[str] = []
    probes: list[str] = []
    clock = [T0 + timedelta(seconds=30)]
    reader = _reader(asked, clock, probes=probes)
    start = T0 - timedelta(minutes=30)
    five = timedelta(minutes=5)
    try:
        _observed(reader, since=start, until=clock[0])
        assert len(probes) == 2
        clock[0] = T0 + timedelta(seconds=45)  # the next evaluation (T0 + 67 s) is not due
        _observed(reader, since=start, until=clock[0])
        assert len(probes) == 2 and len(asked) == len(VERDICT_COLUMNS)
        # a sliding window: its start is new (one probe), its newest evaluation known
        _observed(reader, since=clock[0] - five, until=clock[0])
        assert len(probes) == 3
        clock[0] = T0 + timedelta(seconds=65)  # the next one may be written: asked again
        _observed(reader, since=start, until=clock[0])
        assert len(probes) == 4
    finally:
        reader.close()
