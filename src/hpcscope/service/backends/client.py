"""A client of a Prometheus-API engine: Prometheus, VictoriaMetrics (single or cluster), Thanos,
Mimir/Cortex.

One :class:`EngineClient` per server process, one connection pool. What it does for every read:

- **authentication**: a bearer token (read from a file, re-read when the file changes), HTTP
  basic, a client certificate (mutual TLS) with an optional CA bundle; a Mimir/Cortex tenant as
  ``X-Scope-OrgID``; a VictoriaMetrics cluster's tenant is part of its URL
  (``http://vmselect:8481/select/0/prometheus``), to which ``/api/v1/...`` is appended;
- **timeouts and retries**: each request has ``timeout_seconds``; a request the engine did not
  answer (connection refused or reset, timeout, HTTP 429, 502, 503, 504) is retried
  ``retries`` times after ``backoff_seconds`` doubled per retry (a ``Retry-After`` wins), at
  most :data:`MAX_BACKOFF_SECONDS`; a refused query (HTTP 400, 422: bad PromQL, too many
  samples) is not retried;
- **limits**: an answer with more than ``max_series`` series, or a ``query_range`` answer with
  more than ``max_points`` points, is refused; a ``query_range`` window is read in chunks so
  that each stays under Prometheus' 11,000 points per series and ``max_points``;
- **errors**: :class:`MetricsBackendError` names the engine's URL and the query, and what the
  engine said; :attr:`EngineClient.health` keeps the last success and failure for the
  collection-health alert (an engine that is down is a collection fault, ``OPS-2``).
"""

from __future__ import annotations

import base64
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import httpx2
import numpy as np

from hpcscope.ingest.promql.answer import Answer, Series, decode_answer, engine_error
from hpcscope.ingest.tls import default_tls_context
from hpcscope.model.errors import HpcscopeError
from hpcscope.model.timeutil import epoch_seconds, utcnow
from hpcscope.service.backends.vectors import Vector, decode_vector
from hpcscope.service.engine_settings import EngineSettings

log = logging.getLogger(__name__)

#: Longest wait between two tries.
MAX_BACKOFF_SECONDS = 10.0
#: Prometheus refuses a query_range of more than 11,000 points per series.
MAX_STEPS_PER_QUERY = 10_000
#: HTTP statuses that mean "not now" rather than "not this query".
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Characters of a query quoted in an error (a selector of 200 job ids is long).
QUOTED_QUERY_CHARS = 300


class MetricsBackendError(HpcscopeError, RuntimeError):
    """The metrics backend did not answer, or refused: names the URL and the query."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How to reach the engine (``prometheus_*`` settings, ``docs/settings.md``)."""

    url: str
    timeout_seconds: float = 30.0
    retries: int = 2
    backoff_seconds: float = 0.5
    max_series: int = 50_000
    max_points: int = 2_000_000
    bearer_token_file: Path | None = None
    basic_user: str | None = None
    basic_password_file: Path | None = None
    client_certfile: Path | None = None
    client_keyfile: Path | None = None
    ca_file: Path | None = None
    tenant: str | None = None

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> EngineConfig:
        if settings.prometheus_url is None:
            raise ValueError("no prometheus_url")
        return cls(
            url=settings.prometheus_url.rstrip("/"),
            timeout_seconds=settings.prometheus_timeout_seconds,
            retries=settings.prometheus_retries,
            backoff_seconds=settings.prometheus_retry_backoff_seconds,
            max_series=settings.prometheus_max_series,
            max_points=settings.prometheus_max_points,
            bearer_token_file=settings.prometheus_bearer_token_file,
            basic_user=settings.prometheus_basic_user,
            basic_password_file=settings.prometheus_basic_password_file,
            client_certfile=settings.prometheus_client_certfile,
            client_keyfile=settings.prometheus_client_keyfile,
            ca_file=settings.prometheus_ca_file,
            tenant=settings.prometheus_tenant,
        )


@dataclass(frozen=True, slots=True)
class EngineHealth:
    """The engine as this process last saw it (no job data: shown to every viewer)."""

    url: str
    last_success: datetime | None = None
    last_failure: datetime | None = None
    last_error: str | None = None

    @property
    def down(self) -> bool:
        """The newest request failed."""
        return self.last_failure is not None and (
            self.last_success is None or self.last_failure >= self.last_success
        )


def _quoted(query: str) -> str:
    short = query if len(query) <= QUOTED_QUERY_CHARS else query[:QUOTED_QUERY_CHARS] + "..."
    return f"query {short!r}"


class _SecretFile:
    """A file's stripped text, re-read when its modification time or size changes."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what
        self._stamp: tuple[int, int] | None = None
        self._text = ""

    def text(self) -> str:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                self._text = self.path.read_text(encoding="utf-8").strip()
                self._stamp = stamp
        except OSError as error:
            raise MetricsBackendError(
                f"cannot read the {self.what} {self.path}: {error.strerror}"
            ) from None
        return self._text


def _tls(config: EngineConfig) -> ssl.SSLContext:
    if config.client_certfile is None and config.ca_file is None:
        return default_tls_context()
    try:
        context = ssl.create_default_context(
            cafile=str(config.ca_file) if config.ca_file is not None else None
        )
        if config.client_certfile is not None and config.client_keyfile is not None:
            context.load_cert_chain(str(config.client_certfile), str(config.client_keyfile))
    except (OSError, ssl.SSLError) as error:
        raise MetricsBackendError(f"the engine's TLS files cannot be used: {error}") from error
    return context


class EngineClient:
    """Queries of one engine (see the module docstring).

    Args:
        config: where and how.
        transport: an httpx2 transport (tests), else the network.
        sleep: how to wait between tries (tests pass a recorder).
        now: the clock of :attr:`health`.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        transport: httpx2.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.config = config
        self.url = config.url.rstrip("/")
        self._transport = transport
        self._sleep = sleep
        self._now = now
        self._client: httpx2.Client | None = None
        self._lock = threading.Lock()
        self._health = EngineHealth(self.url)
        self._token = (
            _SecretFile(config.bearer_token_file, "bearer token file")
            if config.bearer_token_file is not None
            else None
        )
        self._password = (
            _SecretFile(config.basic_password_file, "basic password file")
            if config.basic_password_file is not None
            else None
        )

    # ------------------------------------------------------------------ plumbing

    @property
    def health(self) -> EngineHealth:
        with self._lock:
            return self._health

    def _note(self, error: str | None) -> None:
        with self._lock:
            if error is None:
                self._health = replace(self._health, last_success=self._now())
            else:
                self._health = replace(self._health, last_failure=self._now(), last_error=error)

    def _http(self) -> httpx2.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx2.Client(
                    timeout=self.config.timeout_seconds,
                    transport=self._transport,
                    verify=_tls(self.config),
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def headers(self) -> dict[str, str]:
        """The headers every request carries (authentication, tenant)."""
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.text()}"
        elif self._password is not None and self.config.basic_user is not None:
            pair = f"{self.config.basic_user}:{self._password.text()}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        if self.config.tenant:
            headers["X-Scope-OrgID"] = self.config.tenant
        return headers

    def _backoff(self, attempt: int, response: httpx2.Response | None) -> float:
        wait = float(self.config.backoff_seconds * (2**attempt))
        if response is not None:
            after = response.headers.get("retry-after", "")
            if after.strip().isdigit():
                wait = float(after.strip())
        return min(MAX_BACKOFF_SECONDS, wait)

    def post(self, path: str, form: dict[str, str], *, query: str) -> bytes:
        """POST ``form`` to ``path`` (``/api/v1/query``...), with retries; the body of a 2xx
        answer. Raises :class:`MetricsBackendError` naming the URL and ``query``."""
        endpoint = f"{self.url}{path}"
        tries = self.config.retries + 1
        failure = ""
        for attempt in range(tries):
            response: httpx2.Response | None = None
            try:
                response = self._http().post(endpoint, data=form, headers=self.headers())
            except httpx2.TransportError as error:
                failure = f"{type(error).__name__}: {error}"
            else:
                if response.status_code < 300:
                    self._note(None)
                    return response.content
                if response.status_code not in RETRY_STATUSES:
                    message = self._refusal(endpoint, response, query)
                    self._note(message)
                    raise MetricsBackendError(message)
                failure = f"HTTP {response.status_code}"
            if attempt + 1 < tries:
                wait = self._backoff(attempt, response)
                log.info("%s: %s, retry in %.1f s", endpoint, failure, wait)
                self._sleep(wait)
        message = f"{endpoint} did not answer after {tries} tries ({failure}); {_quoted(query)}"
        self._note(message)
        raise MetricsBackendError(message)

    @staticmethod
    def _refusal(endpoint: str, response: httpx2.Response, query: str) -> str:
        said = engine_error(response.content)
        if said is not None:
            reason = f"{said[0]}: {said[1]}"
        else:
            reason = response.text[:200].strip() or response.reason_phrase
        return f"{endpoint} refused (HTTP {response.status_code}, {reason}); {_quoted(query)}"

    def _checked(self, answer: Answer, endpoint: str, query: str) -> Answer:
        if len(answer.series) > self.config.max_series:
            raise MetricsBackendError(
                f"{endpoint}: {len(answer.series)} series, more than prometheus_max_series "
                f"({self.config.max_series}); {_quoted(query)}"
            )
        if answer.points > self.config.max_points:
            raise MetricsBackendError(
                f"{endpoint}: {answer.points} points, more than prometheus_max_points "
                f"({self.config.max_points}); {_quoted(query)}"
            )
        return answer

    # ------------------------------------------------------------------ queries

    def query(self, expr: str, *, at: datetime | float) -> Answer:
        """An instant query at ``at`` (naive UTC or epoch seconds)."""
        when = at if isinstance(at, float | int) else epoch_seconds(at)
        path = "/api/v1/query"
        body = self.post(path, {"query": expr, "time": f"{when:.3f}"}, query=expr)
        endpoint = f"{self.url}{path}"
        return self._checked(
            decode_answer(body, source=f"{endpoint} {_quoted(expr)}"), endpoint, expr
        )

    def query_vector(self, expr: str, *, at: datetime | float) -> Vector:
        """An instant query at ``at`` whose answer is an instant vector, decoded column-wise
        (:mod:`hpcscope.service.backends.vectors`); the same limits as :meth:`query`."""
        when = at if isinstance(at, float | int) else epoch_seconds(at)
        path = "/api/v1/query"
        body = self.post(path, {"query": expr, "time": f"{when:.3f}"}, query=expr)
        endpoint = f"{self.url}{path}"
        vector = decode_vector(body, source=f"{endpoint} {_quoted(expr)}")
        if len(vector) > self.config.max_series:
            raise MetricsBackendError(
                f"{endpoint}: {len(vector)} series, more than prometheus_max_series "
                f"({self.config.max_series}); {_quoted(expr)}"
            )
        if len(vector) > self.config.max_points:
            raise MetricsBackendError(
                f"{endpoint}: {len(vector)} points, more than prometheus_max_points "
                f"({self.config.max_points}); {_quoted(expr)}"
            )
        return vector

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> Answer:
        """``query_range`` over ``[start, end]`` (epoch seconds) at ``step`` seconds, read in
        chunks (see the module docstring); the chunks' series joined by label set."""
        if end < start:
            return Answer("matrix", ())
        joined: dict[tuple[tuple[str, str], ...], list[Series]] = {}
        for chunk in self._chunks(expr, start, end, step):
            for series in chunk.series:
                joined.setdefault(tuple(sorted(series.labels.items())), []).append(series)
            if len(joined) > self.config.max_series:
                raise MetricsBackendError(
                    f"{self.url}/api/v1/query_range: more than prometheus_max_series "
                    f"({self.config.max_series}) series; {_quoted(expr)}"
                )
        return Answer("matrix", tuple(_concat(parts) for parts in joined.values()))

    def _chunks(self, expr: str, start: float, end: float, step: float) -> Iterator[Answer]:
        path = "/api/v1/query_range"
        endpoint = f"{self.url}{path}"
        steps_per_chunk = MAX_STEPS_PER_QUERY
        at = start
        while at <= end:
            last = min(end, at + (steps_per_chunk - 1) * step)
            form = {
                "query": expr,
                "start": f"{at:.3f}",
                "end": f"{last:.3f}",
                "step": f"{step:.3f}",
            }
            body = self.post(path, form, query=expr)
            answer = self._checked(
                decode_answer(body, source=f"{endpoint} {_quoted(expr)}"), endpoint, expr
            )
            yield answer
            # the next chunks hold at most half the point budget at the series count seen
            series = max(1, len(answer.series))
            fit = max(1, self.config.max_points // (2 * series))
            steps_per_chunk = max(1, min(MAX_STEPS_PER_QUERY, fit))
            at = last + step
            if math.isclose(at, last):  # a zero step would never end
                break


def _concat(parts: list[Series]) -> Series:
    if len(parts) == 1:
        return parts[0]
    return Series(
        parts[0].labels,
        np.concatenate([p.times for p in parts]),
        np.concatenate([p.values for p in parts]),
    )
