"""UTC time helpers: the one place that converts between clocks, epochs and ISO text.

The store keeps **naive UTC** ``TIMESTAMP`` values (``SET TimeZone = 'UTC'``), so every helper
here returns naive UTC datetimes and reads a naive datetime as UTC. Epochs are Unix seconds
(float) or microseconds (int, the ``ts`` precision of :mod:`hpcscope.model.schemas`). ISO text
is ISO 8601 with a ``Z`` suffix for UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

Timespec = Literal["auto", "seconds", "milliseconds", "microseconds"]


def utcnow() -> datetime:
    """The wall clock now, as naive UTC (what the store keeps)."""
    return datetime.now(UTC).replace(tzinfo=None)


def as_naive_utc(moment: datetime) -> datetime:
    """``moment`` as naive UTC: an aware datetime is converted, a naive one is already UTC."""
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def as_aware_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime; a naive datetime is read as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def epoch_seconds(moment: datetime) -> float:
    """Seconds since the Unix epoch; a naive datetime is UTC (as the store keeps them)."""
    return as_aware_utc(moment).timestamp()


def epoch_micros(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch (exact, no float); a naive datetime is UTC."""
    return (as_aware_utc(moment) - _EPOCH) // _MICROSECOND


def from_epoch_seconds(seconds: float) -> datetime:
    """The naive UTC datetime ``seconds`` after the Unix epoch."""
    return datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None)


def from_epoch_micros(micros: float) -> datetime:
    """The naive UTC datetime ``micros`` microseconds after the Unix epoch (no float seconds:
    exact for whole microseconds)."""
    return _EPOCH.replace(tzinfo=None) + timedelta(microseconds=micros)


def iso_z(moment: datetime, *, timespec: Timespec = "auto") -> str:
    """ISO 8601 text of ``moment``: a naive (UTC) datetime gets a ``Z`` suffix, an aware one
    keeps its own offset.

    Args:
        moment: the time.
        timespec: as :meth:`datetime.isoformat` (``auto`` drops zero microseconds).
    """
    text = moment.isoformat(timespec=timespec)
    return text + "Z" if moment.tzinfo is None else text


def parse_iso_utc(text: str) -> datetime:
    """ISO 8601 text (``Z`` or an explicit offset, or none: UTC) as a naive UTC datetime.

    Raises:
        ValueError: ``text`` is not ISO 8601 (the message quotes it).
    """
    try:
        parsed = datetime.fromisoformat(text.removesuffix("Z"))
    except ValueError as exc:
        raise ValueError(f"not an ISO 8601 UTC time: {text!r}") from exc
    return as_naive_utc(parsed)
