"""Every table of the client commands at 60, 80 and 120 columns: no id is ever cut.

One live server over a store with long ids (an array task ``41231234_17``, a heterogeneous
component ``41231240+1``), long job names, alerts, an audit entry, file accesses, finished jobs
(chargeback, SLOs) and a token. Each command runs as a terminal of each width would see it
(``cli/tables.py``'s ``terminal_width``, the one place the width is read); every id, job name,
user, node and verdict of the document must appear whole, nothing is cut (``…``), the lines fit
the width, and a column left out is named in the footer.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from hpcscope.cli import tables
from hpcscope.cli.main import app
from hpcscope.model.alerts import Alert, Evidence, Severity, Vector
from hpcscope.model.file_access import FILE_ACCESS_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.jobs.summaries import summarise_finished_jobs
from hpcscope.service.settings import Settings
from hpcscope.store.alerts import upsert_alerts
from hpcscope.store.file_access import append_file_access
from hpcscope.store.notify import AuditEntry, record_audit
from tests.conftest import DEMO_PASSWORDS, demo_users
from tests.support.notify_data import job_rows, write_jobs
from tests.support.servers import live_server

runner = CliRunner()
WIDTHS = (60, 80, 120)
ARRAY, HET, DONE = "41231234_17", "41231240+1", "41231190"
SHARD = "/lustre/checkpoints/llama-7b-pretrain/step-001200/model-00001-of-00004.safetensors"


def _jobs(now: Any) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    specs = [
        (ARRAY, "alice", "vision", "RUNNING", [(0.8, 0.99)] * 4, "gpu01", 0, "llama-7b-pretrain"),
        (HET, "bob", "nlp", "RUNNING", [(0.1, 0.9)] * 2, "gpu01", 4, "clip-laion-stream-42"),
        (DONE, "dave", "speech", "COMPLETED", [(0.7, 0.95)] * 2, "gpu02", 0, "whisper-train-7"),
    ]
    jobs = []
    for job_id, user, account, state, gpus, node, first, name in specs:
        record, rows = job_rows(
            job_id, user=user, account=account, state=state, gpus=gpus, now=now, node=node,
            first_gpu=first, minutes=20,
        )  # fmt: skip
        record["name"] = name
        if state != "RUNNING":
            record["end_time"] = now - timedelta(minutes=5)
            record["submit_time"] = now - timedelta(minutes=40)
            record["exit_code"] = 0
            rows = [r for r in rows if r["ts"] <= record["end_time"]]
        jobs.append((record, rows))
    return jobs


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("widths") / "s.duckdb"
    service = Service.open(Settings(store_path=path, secret_key="k"), users=demo_users())
    now = utcnow()
    write_jobs(service.store, _jobs(now))
    summarise_finished_jobs(service.store, now=now, scrape_interval_seconds=15.0)
    miner = Alert(
        "SC-2", Vector.SUPPLY_CHAIN, Severity.CRITICAL, "A binary run from a temp directory",
        now, now, count=3, node="gpu01", job_id=ARRAY, subject="/tmp/ultralytics_runner",
        evidence=(Evidence("Falco rule 'Drop and execute new binary'", "falco.json", "line 1"),),
    )  # fmt: skip
    reader = Alert(
        "W-1", Vector.DATA_POISONING, Severity.HIGH, "A checkpoint opened by another account",
        now, now, node="gpu01", job_id=HET, gpu=5, subject=SHARD,
    )  # fmt: skip
    upsert_alerts(service.store, [miner, reader]).result()
    record_audit(
        service.store,
        [
            AuditEntry(at=now, kind="action", rule_id="idle-allocation", job_id=HET, user="bob",
                       account="nlp", channel="scancel", recipient=None, outcome="cancelled",
                       detail=f"scancel {HET}: the allocation did no work for 60 minutes")
        ],
    ).result()  # fmt: skip
    access = [
        {"ts": now, "path": SHARD, "access": "read", "bytes": 4096, "node": "gpu01",
         "job_id": HET, "pid": 4242, "uid": 1000, "binary": "/usr/bin/python3",
         "arguments": "x.py", "exec_id": None, "function": "security_file_permission",
         "source_kind": "tetragon", "source_name": "t.log", "source_line": 1}
    ]  # fmt: skip
    append_file_access(
        service.store, pa.Table.from_pylist(access, schema=FILE_ACCESS_SCHEMA)
    ).result()
    try:
        with live_server(create_app(service)) as url:
            made = runner.invoke(
                app,
                ["token", "create", "--label", "nightly chargeback export to the finance team",
                 *_auth(url)],
            )  # fmt: skip
            assert made.exit_code == 0, made.output
            yield url
    finally:
        service.close()


def _auth(url: str, user: str = "admin") -> list[str]:
    return ["--url", url, "--user", user, "--password", DEMO_PASSWORDS[user]]


def _run(monkeypatch: pytest.MonkeyPatch, width: int | None, args: list[str]) -> str:
    monkeypatch.setattr(tables, "terminal_width", lambda: width)
    result = runner.invoke(app, args, env={"NO_COLOR": ""})
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _document(url: str, args: list[str]) -> Any:
    result = runner.invoke(app, [*args, "--json", *_auth(url)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _check(out: str, width: int, whole: set[str], *, fits: bool = True) -> None:
    """Every value of ``whole`` is a word of ``out``; with ``fits``, every line fits (prose
    lines beside a table are the terminal's to wrap: ``fits=False``)."""
    assert "…" not in out
    words = set(re.split(r"\s+", out))
    missing = {value for value in whole if value not in words}
    assert not missing, f"not whole at {width} columns: {missing}\n{out}"
    if fits:
        assert max(len(line) for line in out.splitlines()) <= width, out


#: command -> the document's values that must show whole (ids, names, users, nodes, verdicts)
def _whole_jobs(doc: Any) -> set[str]:
    return {str(j[k]) for j in doc["jobs"] for k in ("job_id", "name", "user", "verdict")}


def _whole_alerts(doc: Any) -> set[str]:
    return {str(a[k]) for a in doc["alerts"] for k in ("rule_id", "job_id", "user", "node")}


@pytest.mark.parametrize("width", WIDTHS)
def test_jobs_and_alerts_keep_every_id_whole(
    server: str, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    jobs = _document(server, ["jobs"])
    assert {j["job_id"] for j in jobs["jobs"]} == {ARRAY, HET, DONE}
    out = _run(monkeypatch, width, ["jobs", *_auth(server)])
    _check(out, width, _whole_jobs(jobs))
    if width < 120:
        footer = out[out.index("Not shown at") :]
        assert "allocated GPU-h" in " ".join(footer.split())
    alerts = _document(server, ["alerts"])
    out = _run(monkeypatch, width, ["alerts", *_auth(server)])
    _check(out, width, _whole_alerts(alerts))


@pytest.mark.parametrize("width", WIDTHS)
def test_job_pages_keep_ids_nodes_and_verdicts_whole(
    server: str, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    for job_id in (ARRAY, HET):
        doc = _document(server, ["job", job_id])
        whole = {doc["job_id"], doc["name"], doc["user"]}
        whole |= {str(g[k]) for g in doc["gpus"] for k in ("node", "verdict")}
        whole |= {a["rule_id"] for a in doc["alerts"]}
        out = _run(monkeypatch, width, ["job", job_id, *_auth(server)])
        _check(out, width, whole, fits=False)
        report = _run(monkeypatch, width, ["job", "report", job_id, *_auth(server)])
        assert "…" not in report and doc["job_id"] in report.split()


def test_the_alerts_subject_is_not_headed_rank(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _run(monkeypatch, None, ["job", HET, *_auth(server)])
    header = next(line for line in out.splitlines() if line.startswith("severity"))
    assert "rank" in header and "subject" in header  # "subject (rank, path, ...)"
    assert SHARD in out  # whole in a pipe


@pytest.mark.parametrize("width", WIDTHS)
def test_the_other_tables_keep_their_ids_whole(
    server: str, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    charge = _document(server, ["chargeback", "--by", "user"])
    assert charge["rows"], charge
    out = _run(monkeypatch, width, ["chargeback", "--by", "user", *_auth(server)])
    _check(out, width, {r["key"] for r in charge["rows"]})
    out = _run(monkeypatch, width, ["slo", *_auth(server)])
    assert "…" not in out and "Successful" in out
    audit = _document(server, ["notify", "audit"])
    out = _run(monkeypatch, width, ["notify", "audit", *_auth(server)])
    _check(out, width, {e["job_id"] for e in audit["entries"]} | {"idle-allocation"})
    tokens = _document(server, ["token", "list"])
    out = _run(monkeypatch, width, ["token", "list", *_auth(server)])
    _check(out, width, {f"hps_{t['token_id']}" for t in tokens["tokens"]} | {"admin"})
    who = _document(server, ["access", SHARD])
    out = _run(monkeypatch, width, ["access", SHARD, *_auth(server)])
    _check(out, width, {a["job_id"] for a in who["accessors"]} | {"bob", "gpu01"})


def test_tsv_is_one_line_per_row(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _run(monkeypatch, 60, ["jobs", "--format", "tsv", *_auth(server)])
    lines = out.splitlines()
    assert lines[0].split("\t")[:3] == ["job id", "job name", "user"]
    assert sorted(line.split("\t")[0] for line in lines[1:]) == sorted([ARRAY, HET, DONE])
    assert all(len(line.split("\t")) == 11 for line in lines)
    alerts = _run(monkeypatch, 60, ["alerts", "--format", "tsv", *_auth(server)])
    assert len(alerts.splitlines()) == 3
    bad = runner.invoke(app, ["jobs", "--format", "csv", *_auth(server)])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == "hpcscope: --format: 'csv' is not one of table, tsv"


def _hpcscope(url: str, args: list[str], **env: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``hpcscope ARGS`` as admin against ``url``."""
    import hpcscope

    source = str(Path(hpcscope.__file__).parents[1])
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    environ |= {
        "PYTHONPATH": source,
        "HPCSCOPE_USER": "admin",
        "HPCSCOPE_PASSWORD": DEMO_PASSWORDS["admin"],
        "HPCSCOPE_URL": url,
        **env,
    }
    return [sys.executable, "-m", "hpcscope", *args], environ


def test_in_a_pipe_rows_print_whole_whatever_columns_says(server: str) -> None:
    """``COLUMNS=80 hpcscope jobs | cat`` and ``hpcscope alerts | cat``."""
    for command in (["jobs"], ["alerts"]):
        argv, environ = _hpcscope(server, command, COLUMNS="80")
        done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "…" not in done.stdout and "Not shown" not in done.stdout
        assert "\x1b[" not in done.stdout  # no colour in a pipe
        for job_id in (ARRAY, HET):
            assert job_id in done.stdout.split()
    assert f"{SHARD}" in done.stdout  # the alerts' subject, whole


def _on_a_terminal(argv: list[str], environ: dict[str, str], columns: int) -> str:
    """Run ``argv`` with a pseudo-terminal of ``columns`` as its stdout; its output."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {k: v for k, v in environ.items() if k != "COLUMNS"}
    with subprocess.Popen(argv, env=environ, stdout=child, stderr=subprocess.PIPE) as process:
        os.close(child)
        out = _read_all(main)
        errors = process.stderr.read() if process.stderr else b""
        assert process.wait(timeout=60) == 0, errors
    return out


def _read_all(main: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_on_a_real_terminal_of_80_columns(server: str) -> None:
    argv, environ = _hpcscope(server, ["jobs"])
    out = _on_a_terminal(argv, environ, 80)
    assert "\x1b[1m" in out  # a bold header on a terminal
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert all(len(line) <= 80 for line in plain.splitlines()), plain
    assert {ARRAY, HET, DONE} <= set(plain.split()) and "Not shown at 80 columns" in plain
    argv, environ = _hpcscope(server, ["jobs"], NO_COLOR="1")
    assert "\x1b[" not in _on_a_terminal(argv, environ, 80)
