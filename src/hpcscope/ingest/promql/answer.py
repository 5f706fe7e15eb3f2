"""Any Prometheus HTTP API query answer (``vector``, ``matrix``, ``scalar``) -> typed series.

``/api/v1/query`` and ``/api/v1/query_range`` answer the same JSON on Prometheus,
VictoriaMetrics, Thanos and Mimir::

    {"status": "success",
     "data": {"resultType": "vector",
              "result": [{"metric": {"hpc_job": "42", "gpu": "0"}, "value": [1764633600, "0.5"]}]}}

    {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: ..."}

Decoded with msgspec into :class:`Series` (labels, NumPy times and values): a 1024-GPU answer
is decoded without a Python object per point. Values are Go float text (``"NaN"``, ``"+Inf"``);
a bad answer raises :class:`PromqlResponseError` naming the source and the JSON path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from hpcscope.model.bounds import refusing_deep_nesting
from hpcscope.model.errors import SourceError

__all__ = [
    "Answer",
    "PromqlResponseError",
    "Series",
    "answer_data",
    "decode_answer",
    "engine_error",
]


class PromqlResponseError(SourceError):
    """A Prometheus HTTP API answer that is not usable (not JSON, an error, a bad shape)."""


class _Data(msgspec.Struct, frozen=True):
    resultType: str  # noqa: N815  (the API's name)
    result: msgspec.Raw


class _Envelope(msgspec.Struct, frozen=True):
    status: str
    data: _Data | None = None
    errorType: str | None = None  # noqa: N815
    error: str | None = None


class _Sample(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    value: tuple[float, str]


class _Range(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    values: list[tuple[float, str]]


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_VECTOR = msgspec.json.Decoder(list[_Sample])
_MATRIX = msgspec.json.Decoder(list[_Range])
_SCALAR = msgspec.json.Decoder(tuple[float, str])


@dataclass(frozen=True, slots=True)
class Series:
    """One series of an answer.

    Attributes:
        labels: its label set (``__name__`` included when the engine kept it).
        times: epoch seconds, float64, ascending.
        values: float64 (NaN where the engine wrote NaN).
    """

    labels: dict[str, str]
    times: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]

    @property
    def last(self) -> float:
        """The newest value (NaN for an empty series)."""
        return float(self.values[-1]) if self.values.size else float("nan")


@dataclass(frozen=True, slots=True)
class Answer:
    """A decoded answer: its result type and series (a scalar is one series without labels)."""

    result_type: str
    series: tuple[Series, ...]

    @property
    def points(self) -> int:
        return sum(s.values.size for s in self.series)


def engine_error(body: bytes) -> tuple[str, str] | None:
    """``(errorType, error)`` of an error answer, None when ``body`` is not one."""
    try:
        envelope = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if envelope.status == "success":
        return None
    return envelope.errorType or "?", envelope.error or "?"


def _floats(texts: Sequence[str], *, source: str, where: str) -> npt.NDArray[np.float64]:
    try:
        return np.array([float(t) for t in texts], dtype=np.float64)
    except ValueError as error:
        raise PromqlResponseError(f"not a number: {error}", source=source, field=where) from error


def answer_data(body: bytes, *, source: str) -> tuple[str, msgspec.Raw]:
    """The ``resultType`` and the undecoded ``result`` of a successful answer.

    Raises:
        PromqlResponseError: not JSON, ``status`` not success, no ``data``.
    """
    try:
        with refusing_deep_nesting(source=source):
            envelope = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise PromqlResponseError(
            f"not an answer of the Prometheus API: {error}", source=source
        ) from error
    if envelope.status != "success":
        raise PromqlResponseError(
            f"the query failed: {envelope.errorType or '?'}: {envelope.error or '?'}",
            source=source,
            field="status",
        )
    if envelope.data is None:
        raise PromqlResponseError("no data", source=source, field="data")
    return envelope.data.resultType, envelope.data.result


def decode_answer(body: bytes, *, source: str) -> Answer:
    """Decode one answer.

    Args:
        body: the HTTP body.
        source: what errors name (the URL and the query).

    Raises:
        PromqlResponseError: not JSON, ``status`` not success, an unknown result type, a
            point that is no ``[time, "value"]`` pair.
    """
    kind, raw = answer_data(body, source=source)
    try:
        if kind == "vector":
            samples = _VECTOR.decode(raw)
            values = _floats([s.value[1] for s in samples], source=source, where="data.result")
            times = np.array([s.value[0] for s in samples], dtype=np.float64)
            series = tuple(
                Series(s.metric, times[i : i + 1], values[i : i + 1]) for i, s in enumerate(samples)
            )
        elif kind == "matrix":
            ranges = _MATRIX.decode(raw)
            series = tuple(
                Series(
                    r.metric,
                    np.array([p[0] for p in r.values], dtype=np.float64),
                    _floats([p[1] for p in r.values], source=source, where=f"data.result[{i}]"),
                )
                for i, r in enumerate(ranges)
            )
        elif kind == "scalar":
            at, text = _SCALAR.decode(raw)
            value = _floats([text], source=source, where="data.result")
            series = (Series({}, np.array([at], dtype=np.float64), value),)
        else:
            raise PromqlResponseError(
                f"unexpected result type {kind!r}", source=source, field="data.resultType"
            )
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise PromqlResponseError(
            f"bad {kind}: {error}", source=source, field="data.result"
        ) from error
    return Answer(kind, series)
