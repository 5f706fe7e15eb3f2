"""The CLI's one error handler: an HpcscopeError is one line on stderr and an exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.cli.output import EXIT_RUNTIME_ERROR, EXIT_USAGE_ERROR, error_exit_code, error_line
from hpcscope.model.errors import (
    AccessError,
    ConfigError,
    HpcscopeError,
    InputError,
    ScrapeError,
    SourceError,
    StoreError,
)


def test_a_settings_file_error_names_file_line_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "site.yaml"
    config.write_text("- not\n- a mapping\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(config), "--for", "1s"])
    assert result.exit_code == EXIT_USAGE_ERROR
    assert result.stderr.splitlines() == [f"hpcscope: {config}:1: settings must be a mapping"]
    assert "Traceback" not in result.output


def test_a_store_that_is_not_duckdb_exits_1_with_one_line(tmp_path: Path) -> None:
    store = tmp_path / "broken.duckdb"
    store.write_bytes(b"this is not a DuckDB file\n" * 200)
    result = CliRunner().invoke(app, ["serve", "--store", str(store), "--for", "1s"])
    assert result.exit_code == EXIT_RUNTIME_ERROR
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"hpcscope: cannot open store {store}: ")
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_with_json_the_error_is_also_the_json_document(tmp_path: Path) -> None:
    config = tmp_path / "site.yaml"
    config.write_text("port: 99999\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(config), "--json"])
    assert result.exit_code == EXIT_USAGE_ERROR
    body = json.loads(result.stdout)
    assert body["where"]["source"] == str(config) and body["where"]["field"] == "port"
    assert body["error"].startswith(f"{config}: port: ")
    assert result.stderr.startswith(f"hpcscope: {config}: port: ")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SourceError("bad", source="x"), EXIT_USAGE_ERROR),
        (ConfigError("bad", source="x"), EXIT_USAGE_ERROR),
        (InputError("bad"), EXIT_USAGE_ERROR),
        (StoreError("locked"), EXIT_RUNTIME_ERROR),
        (AccessError("denied"), EXIT_RUNTIME_ERROR),
        (ScrapeError("timeout"), EXIT_RUNTIME_ERROR),
        (HpcscopeError("other"), EXIT_RUNTIME_ERROR),
    ],
)
def test_exit_codes_follow_the_house_style(error: HpcscopeError, code: int) -> None:
    assert error_exit_code(error) == code


def test_the_error_line_carries_source_line_and_column_on_one_line() -> None:
    error = SourceError("unexpected token\n  here", source="page.txt", line=3, column=7)
    assert error_line(error) == "hpcscope: page.txt:3:7: unexpected token here"
    assert error_line(HpcscopeError()) == "hpcscope: HpcscopeError"
