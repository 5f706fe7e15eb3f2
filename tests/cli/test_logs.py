"""Process logging: quiet per-request loggers at INFO, JSON lines on request."""

from __future__ import annotations

import json
import logging

import pytest

from hpcscope.cli.logs import configure_logging
from hpcscope.model.errors import InputError


def test_per_request_lines_are_hidden_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    logging.getLogger("httpx2").info('HTTP Request: GET http://n1:9400/metrics "200 OK"')
    logging.getLogger("uvicorn.access").info("GET /api/jobs 200")
    logging.getLogger("hpcscope.service.collect.collector").info("collector: 4 targets up")
    err = capsys.readouterr().err
    assert "HTTP Request" not in err
    assert "/api/jobs" not in err
    assert "collector: 4 targets up" in err


def test_debug_shows_per_request_lines(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("DEBUG")
    logging.getLogger("httpx2").info("HTTP Request: GET http://n1:9400/metrics")
    assert "HTTP Request" in capsys.readouterr().err


def test_json_format_is_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    configure_logging("info", "json")  # configuring twice must not double the lines
    logging.getLogger("hpcscope.test").warning("two\nlines")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    document = json.loads(lines[0])
    assert document["level"] == "warning"
    assert document["logger"] == "hpcscope.test"
    assert document["message"] == "two\nlines"
    assert document["ts"].endswith("+00:00")


@pytest.mark.parametrize(
    ("level", "fmt", "option"), [("loud", "text", "--log-level"), ("info", "xml", "--log-format")]
)
def test_unknown_level_or_format_names_the_option(level: str, fmt: str, option: str) -> None:
    with pytest.raises(InputError, match=option):
        configure_logging(level, fmt)
