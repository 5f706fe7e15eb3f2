"""Logging for the process, configured in one place.

Our loggers go to stderr at the chosen level, as text or as one JSON object per line. The
third-party loggers that write one line per HTTP request (httpx2's and httpx's clients, their
httpcore transports, uvicorn's access log) stay at WARNING unless the level is ``debug``: at INFO
the console carries the URL, the logins, start-up and the collector's one status line a minute.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import TextIO

from hpcscope.model.errors import InputError

#: Levels accepted by ``--log-level`` (and ``HPCSCOPE_LOG_LEVEL``).
LOG_LEVELS = ("debug", "info", "warning", "error")

#: Formats accepted by ``--log-format``.
LOG_FORMATS = ("text", "json")

#: Loggers that log once per request or connection; quiet below DEBUG.
PER_REQUEST_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "uvicorn.access")

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False)


class _Stderr(logging.StreamHandler[TextIO]):
    """A handler on whatever ``sys.stderr`` is now (test runners swap it)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def log_level_or_default(level: str | None) -> str:
    """``level`` if given, else ``HPCSCOPE_LOG_LEVEL``, else ``info``; lower case."""
    return (level or os.environ.get("HPCSCOPE_LOG_LEVEL") or "info").lower()


def configure_logging(level: str = "info", log_format: str = "text") -> None:
    """Send logs to stderr at ``level`` in ``log_format``; replaces an earlier configuration.

    Args:
        level: one of :data:`LOG_LEVELS` (any case).
        log_format: ``text`` (one line, with time, level and logger) or ``json``.

    Raises:
        InputError: an unknown level or format, naming the option.
    """
    level = level.lower()
    if level not in LOG_LEVELS:
        raise InputError(f"--log-level: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    if log_format not in LOG_FORMATS:
        raise InputError(f"--log-format: {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    )
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.DEBUG if level == "debug" else logging.WARNING
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
