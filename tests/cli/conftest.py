"""CLI test fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from hpcscope.cli.logs import PER_REQUEST_LOGGERS


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """``serve`` and ``demo`` configure the process's logging: undo it after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in PER_REQUEST_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
