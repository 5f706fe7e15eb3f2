"""InfiniBand port counters -> rates, resets and saturation (``telemetry.md`` §6).

Counters only go up. One that goes down was reset: ``perfquery -r/-R``, a driver reload, a
reboot, or someone covering RDMA traffic (security rule RD-6: a reset outside maintenance is
itself a finding). Over an interval with a reset the increase is the new value (Prometheus'
``rate`` convention: the counter restarted from 0), the one rule of
:func:`hpcscope.analysis.counters.counter_increase`. A narrow counter stuck at its maximum
(``2**bits - 1``, see :data:`hpcscope.ingest.exporters.infiniband.COUNTER_WIDTH_BITS`) has an
unknown increase: its rate is null, not 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from hpcscope.analysis.counters import counter_increase
from hpcscope.model.schemas import IB_COUNTER_COLUMNS

_PORT = ["node", "device", "port"]


def _rate_name(column: str) -> str:
    return column.removesuffix("_total") + "_per_second"


_SAME = "__same_port"


def _sorted_by_port(counters: pl.DataFrame) -> pl.DataFrame:
    """Rows by port and time, with a flag: the row before is the same port's read.

    ``shift(1)`` under that flag is ``shift(1).over(port)`` on the sorted frame, without a
    window per expression: at 128 nodes and an hour of reads (1.8 M rows, 30 counters) the
    windowed form took most of a rule evaluation.
    """
    frame = counters if _in_port_order(counters) else counters.sort([*_PORT, "ts"])
    same = pl.lit(True)
    for key in _PORT:
        same = same & (pl.col(key) == pl.col(key).shift(1))
    return frame.with_columns(same.fill_null(False).alias(_SAME))


def in_port_order(counters: pl.DataFrame) -> pl.DataFrame:
    """The rows by port and time with each (port, time) once: a sort only when they are not
    in that order already (the store reads them so), then a comparison with the row before
    instead of a hashed ``unique`` (rows read twice by overlapping windows are the same)."""
    frame = counters if _in_port_order(counters) else counters.sort([*_PORT, "ts"])
    if frame.height < 2:
        return frame
    repeat = pl.lit(True)
    for key in [*_PORT, "ts"]:
        repeat = repeat & (pl.col(key) == pl.col(key).shift(1))
    return frame.filter(~repeat.fill_null(False))


def _in_port_order(frame: pl.DataFrame) -> bool:
    """Whether the rows already come by port and time (the store reads them so): one
    comparison pass instead of a sort of string keys (seconds at a million rows)."""
    if frame.height < 2:
        return True
    later = pl.col("ts") >= pl.col("ts").shift(1)
    for key in reversed(_PORT):
        col, before = pl.col(key), pl.col(key).shift(1)
        later = (col > before) | ((col == before) & later)
    return bool(frame.select(later.fill_null(True).all()).item())


def _previous(column: str) -> pl.Expr:
    """The same port's read before this one (null at a port's first row)."""
    return pl.when(pl.col(_SAME)).then(pl.col(column).shift(1))


def port_rates(
    counters: pl.DataFrame, *, widths_bits: Mapping[str, int] | None = None
) -> pl.DataFrame:
    """Per-interval rates of every counter of every port.

    Args:
        counters: ``ib_port_counters`` rows (``ts``, ``node``, ``device``, ``port`` and the
            counter columns of :data:`~hpcscope.model.schemas.IB_COUNTER_COLUMNS`).
        widths_bits: counter -> width in bits, for saturation (default: none saturate).

    Returns:
        One row per port and interval: ``node, device, port, ts`` (interval end),
        ``interval_seconds``, one ``<counter>_per_second`` column per counter (``_total``
        dropped: ``port_data_received_bytes_per_second``), and ``reset_counters`` (the counters
        that went down in the interval).
    """
    widths = dict(widths_bits or {})
    present = [c for c in IB_COUNTER_COLUMNS if c in counters.columns]
    frame = _sorted_by_port(counters)
    previous = {c: _previous(c) for c in present}
    interval = ((pl.col("ts") - _previous("ts")).dt.total_microseconds() / 1e6).alias(
        "interval_seconds"
    )
    rates = []
    resets = []
    for column in present:
        before, after = previous[column], pl.col(column)
        went_down = after < before
        increase = counter_increase(after, before)
        bits = widths.get(column)
        if bits is not None:
            top = float(2**bits - 1)
            increase = pl.when((after == top) & (before == top)).then(None).otherwise(increase)
        rates.append((increase / pl.col("interval_seconds")).alias(_rate_name(column)))
        resets.append(pl.when(went_down).then(pl.lit(column)).otherwise(None))
    out = frame.with_columns(interval).with_columns(
        *rates, pl.concat_list(resets).list.drop_nulls().alias("reset_counters")
    )
    return out.filter(
        pl.col("interval_seconds").is_not_null() & (pl.col("interval_seconds") > 0)
    ).drop(_SAME)


def counter_resets(counters: pl.DataFrame) -> pl.DataFrame:
    """Every counter that went down between two reads of a port.

    Returns:
        ``node, device, port, ts`` (the read that saw it), ``counter``, ``before``, ``after``.
    """
    present = [c for c in IB_COUNTER_COLUMNS if c in counters.columns]
    frame = _sorted_by_port(counters)
    parts = [
        frame.select(
            *_PORT,
            "ts",
            pl.lit(column).alias("counter"),
            _previous(column).alias("before"),
            pl.col(column).alias("after"),
        ).filter(pl.col("after") < pl.col("before"))
        for column in present
    ]
    if not parts:
        return pl.DataFrame(
            schema={"node": pl.String, "device": pl.String, "port": pl.Int16, "ts": pl.Datetime,
                    "counter": pl.String, "before": pl.Float64, "after": pl.Float64}
        )  # fmt: skip
    return pl.concat(parts).sort([*_PORT, "ts", "counter"])
