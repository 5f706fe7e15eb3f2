"""The UTC helpers: naive UTC in and out, exact epochs, ISO text with ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.timeutil import (
    as_naive_utc,
    epoch_micros,
    epoch_seconds,
    from_epoch_micros,
    from_epoch_seconds,
    iso_z,
    parse_iso_utc,
    utcnow,
)

naive = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1))


def test_utcnow_is_naive_utc() -> None:
    before = datetime.now(UTC).replace(tzinfo=None)
    now = utcnow()
    assert now.tzinfo is None
    assert before <= now <= before + timedelta(seconds=5)


def test_a_naive_datetime_is_utc_and_an_aware_one_is_converted() -> None:
    paris = timezone(timedelta(hours=2))
    aware = datetime(2026, 6, 1, 12, 0, tzinfo=paris)
    assert as_naive_utc(aware) == datetime(2026, 6, 1, 10, 0)
    assert epoch_seconds(datetime(1970, 1, 2)) == 86400.0
    assert epoch_seconds(aware) == epoch_seconds(datetime(2026, 6, 1, 10, 0))


@given(naive)
def test_epoch_round_trips(moment: datetime) -> None:
    assert epoch_micros(moment) == round(epoch_seconds(moment) * 1e6)
    assert from_epoch_seconds(epoch_micros(moment) / 1e6) - moment < timedelta(milliseconds=1)
    assert from_epoch_micros(epoch_micros(moment)) == moment
    assert parse_iso_utc(iso_z(moment)) == moment
    assert parse_iso_utc(iso_z(moment, timespec="microseconds")) == moment


def test_iso_text() -> None:
    assert iso_z(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"
    assert iso_z(datetime(2026, 1, 2), timespec="microseconds") == "2026-01-02T00:00:00.000000Z"
    assert iso_z(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02T00:00:00+00:00"
    assert parse_iso_utc("2026-01-02T03:00:00+01:00") == datetime(2026, 1, 2, 2, 0)


def test_bad_iso_text_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 UTC time: 'yesterday'"):
        parse_iso_utc("yesterday")
