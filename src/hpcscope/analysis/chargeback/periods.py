"""Chargeback periods: a month, a year, a day or a range of days, in UTC.

A period is half-open, ``[start, end)``, naive UTC like every stored time. A job that spans a
period boundary is split **by time**: the share of it inside the period is the overlap of its
``[start_time, end_time]`` with the period over its elapsed time (:func:`overlap_share`), and
every figure of the job (allocated, useful, each waste cause, cost) is taken at that share. The
shares of one job over periods that tile its life sum to 1, so monthly figures add up to the
job's total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.model.errors import InputError


class ChargebackPeriodError(InputError, ValueError):
    """A period text that is not ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or
    ``YYYY-MM-DD..YYYY-MM-DD``; the message names the text and the accepted forms."""


FORMS = "YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD (days inclusive, UTC)"

_YEAR = re.compile(r"^(\d{4})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


@dataclass(frozen=True, slots=True)
class Period:
    """``[start, end)`` in naive UTC, with the text it was given as."""

    label: str
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def month_of(moment: datetime) -> Period:
    """The calendar month (UTC) that holds ``moment``."""
    start = datetime(moment.year, moment.month, 1)
    return Period(f"{moment.year:04d}-{moment.month:02d}", start, _next_month(start))


def _next_month(start: datetime) -> datetime:
    return datetime(start.year + (start.month == 12), start.month % 12 + 1, 1)


def _day(text: str, whole: str) -> datetime:
    match = _DAY.match(text)
    if not match:
        raise ChargebackPeriodError(f"period {whole!r}: {text!r} is not a day; use {FORMS}")
    try:
        return datetime(int(match[1]), int(match[2]), int(match[3]))
    except ValueError as exc:
        raise ChargebackPeriodError(f"period {whole!r}: {exc}") from None


def parse_period(text: str) -> Period:
    """The period a user typed (``2026-11``, ``2026``, ``2026-11-03``,
    ``2026-11-01..2026-11-15``: the last day included).

    Raises:
        ChargebackPeriodError: any other text, or a date that does not exist.
    """
    value = text.strip()
    if match := _YEAR.match(value):
        year = int(match[1])
        return Period(value, datetime(year, 1, 1), datetime(year + 1, 1, 1))
    if match := _MONTH.match(value):
        month = int(match[2])
        if not 1 <= month <= 12:
            raise ChargebackPeriodError(f"period {text!r}: month {month} is not 01-12")
        return month_of(datetime(int(match[1]), month, 1))
    if ".." in value:
        first, _, last = value.partition("..")
        start, end = _day(first.strip(), text), _day(last.strip(), text) + timedelta(days=1)
        if end <= start:
            raise ChargebackPeriodError(f"period {text!r}: the last day is before the first")
        return Period(value, start, end)
    if _DAY.match(value):
        start = _day(value, text)
        return Period(value, start, start + timedelta(days=1))
    raise ChargebackPeriodError(f"period {text!r} not understood; use {FORMS}")


def months_ending(period: Period, count: int) -> list[Period]:
    """The ``count`` calendar months up to the one holding the period's last instant,
    oldest first (the trend of the decision-maker view)."""
    last = month_of(period.end - timedelta(microseconds=1))
    months = [last]
    while len(months) < count:
        first = months[0].start
        months.insert(0, month_of(first - timedelta(days=1)))
    return months


def overlap_share(start: datetime | None, end: datetime | None, period: Period) -> float:
    """The share of a job's ``[start, end]`` inside ``period`` (0 to 1).

    A job with one known end (or none elapsed) is an instant: share 1 when it falls inside the
    period, else 0.
    """
    if start is None and end is None:
        return 0.0
    if start is None or end is None or end <= start:
        instant = start if start is not None else end
        assert instant is not None
        return 1.0 if period.start <= instant < period.end else 0.0
    inside = (min(end, period.end) - max(start, period.start)).total_seconds()
    if inside <= 0:
        return 0.0
    return min(1.0, inside / (end - start).total_seconds())
