"""Hostile inputs at every door a file comes in by: bounded by construction (``model/bounds.py``).

Four shapes, full size (:func:`fuzz.hostile.full_size`): a self-referencing pickle (PyTorch's
flight-recorder shape, 37 bytes), a self-referencing YAML anchor graph, a 2 MB gzip that
expands ~1,000 times, and 100,000 nested brackets. Each reaches:

* every reader of outside input (the fuzz targets, and the YAML and JSON files the fuzzer does
  not feed: settings, users, notification rules, kernel classes, the NCCL latency table, a
  measured job, a capture's meta file, the telemetry spool's nvidia-smi files, a Lustre
  changelog, the sensor's and the training events' lines, a trace summary, the Falco meaning
  table, topology and latency files): each returns, or raises a typed error naming the input,
  within 10 s; a reader meeting the hostile shape of its own format (a pickle for the flight
  recorder, an anchor cycle or deep nesting for YAML, a bomb for a gzip reader, deep nesting
  for JSON) refuses it; a reader of plain text reads the others as text;
* the commands that read files: ``hpcscope nccl analyze``, ``traces analyze|summarize|merge``,
  ``deploy --topology``, ``simulate --calibrate|--topology|--latency-table``, ``sensor
  --topology|--config``: within 10 s, exit 2 for an input past a bound;
* the server's trace upload (``POST /api/traces``), the analysis of a server directory, the
  API's JSON bodies and Falco's http_output: 413 or 422 within 10 s (400 for bytes that are
  not JSON at all, never a 500), and the server is idle again within 10 s.

A property per reader: any input of at most 1 MB (random bytes, or the hostile shapes at random
sizes and in the envelopes of :mod:`fuzz.hostile`) returns or raises a typed error within the
bound.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fuzz import hostile
from fuzz.targets import SOURCE, TARGETS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hpcscope.cli.main import app as cli
from hpcscope.model.bounds import BoundExceeded
from hpcscope.model.errors import InputError, SourceError
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import FalcoSection
from tests.conftest import DEMO_PASSWORDS, TEST_PASSWORD_HASH_COST_LOG2, demo_users
from tests.support.servers import live_server

BOUND_SECONDS = 10.0
SHAPES = hostile.full_size()


def _in_file(suffix: str, call: Callable[[Path], object]) -> Callable[[bytes], object]:
    """A reader of a file: the bytes written to ``<SOURCE><suffix>`` in a temporary directory."""

    def read(data: bytes) -> object:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{SOURCE}{suffix}"
            path.write_bytes(data)
            return call(path)

    return read


def _settings(path: Path) -> object:
    from hpcscope.service.settings import load_settings

    return load_settings(path)


def _users(path: Path) -> object:
    from hpcscope.service.identity.users import UserDirectory

    return UserDirectory.from_file(path)


def _notify(path: Path) -> object:
    from hpcscope.service.notify.config import load_notify_config

    return load_notify_config(path)


def _kernel_classes(path: Path) -> object:
    from hpcscope.service.traces.kernel_classes import load_class_file

    return load_class_file(path)


def _text_reader(parse: Callable[[str], object]) -> Callable[[bytes], object]:
    return lambda data: parse(data.decode("utf-8", errors="replace"))


def _latency(text: str) -> object:
    from hpcscope.model.nccl_latency import parse_nccl_latencies

    return parse_nccl_latencies(text, source=SOURCE)


def _measured(text: str) -> object:
    from hpcscope.service.simulate.measured_job import parse_measured_job

    return parse_measured_job(text, source=SOURCE)


def _capture_meta(text: str) -> object:
    from hpcscope.model.capture import CaptureMeta

    return CaptureMeta.from_json(text, source=SOURCE)


def _compute_apps(text: str) -> object:
    from hpcscope.ingest.exporters.nvidia_smi_apps import parse_compute_apps, parse_gpu_index
    from hpcscope.model.errors import SourceError

    try:  # a spool's two files: the GPU index, then the processes
        index = parse_gpu_index(text, source=SOURCE)
    except SourceError:
        index = {}
    return parse_compute_apps(text, node="n1", source=SOURCE, gpu_index=index)


def _changelog(text: str) -> object:
    from hpcscope.ingest.exporters.lustre_changelog import parse_changelog

    return parse_changelog(text, mdt="lustre-MDT0000", source=SOURCE)


def _sensor_lines(data: bytes) -> object:
    from hpcscope.ingest.security.bpftrace import parse_sensor_line
    from hpcscope.ingest.security.lines import SecurityEventError

    out: list[object] = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:  # the sensor skips a bad line, naming it, and reads on
            out.append(parse_sensor_line(line, source=SOURCE, line_number=number))
        except SecurityEventError as exc:
            out.append(exc)
    return out


def _training_events(data: bytes) -> object:
    from hpcscope.ingest.integrity.training_events import parse_event_lines

    return parse_event_lines(enumerate(data.splitlines(), start=1), source=SOURCE)


def _trace_summary(data: bytes) -> object:
    from hpcscope.analysis.traces.rank_summary import decode_summary

    return decode_summary(data, source=SOURCE)


def _falco_meaning(path: Path) -> object:
    from hpcscope.service.alerts.falco_meaning import load_falco_meaning

    return load_falco_meaning(path)


def _topology_file(path: Path) -> object:
    from hpcscope.model.topology import load_topology

    return load_topology(path)


def _latency_file(path: Path) -> object:
    from hpcscope.model.nccl_latency import load_nccl_latencies

    return load_nccl_latencies(path)


READERS: dict[str, Callable[[bytes], object]] = {
    **{name: target.call for name, target in TARGETS.items()},
    "settings": _in_file(".yaml", _settings),
    "users": _in_file(".yaml", _users),
    "notify_rules": _in_file(".yaml", _notify),
    "kernel_classes": _in_file(".yaml", _kernel_classes),
    "nccl_latency": _text_reader(_latency),
    "measured_job": _text_reader(_measured),
    "capture_meta": _text_reader(_capture_meta),
    "compute_apps": _text_reader(_compute_apps),
    "lustre_changelog": _text_reader(_changelog),
    "sensor_lines": _sensor_lines,
    "training_events": _training_events,
    "trace_summary": _trace_summary,
    "falco_meaning": _in_file(".yaml", _falco_meaning),
    "topology_file": _in_file(".yaml", _topology_file),
    "nccl_latency_file": _in_file(".yaml", _latency_file),
}
_YAML = {"file_sd", "topology", "rule_file", "settings", "users", "notify_rules"}
_YAML |= {"kernel_classes", "nccl_latency", "falco_meaning", "topology_file", "nccl_latency_file"}
_JSON = {"sacct_json", "job_record", "measured_job", "capture_meta", "flight_recorder"}
#: reader -> the shapes it must refuse (the hostile shapes of its own format)
MUST_REFUSE: dict[str, set[str]] = {
    **{name: {"self_referencing_yaml", "nesting_100000"} for name in _YAML},
    **{name: {"nesting_100000"} for name in _JSON},
    "flight_recorder": {"self_referencing_pickle", "nesting_100000"},
    "kineto": {"gzip_bomb_2mb"},
    "upload": {"gzip_bomb_2mb"},
}
TYPED = (SourceError, InputError)


def _read(reader: str, data: bytes) -> BaseException | None:
    """The reader on ``data``: None when it returned, the typed error it raised (anything else
    raises), and never past the bound."""
    started = time.monotonic()
    try:
        READERS[reader](data)
    except TYPED as exc:
        return exc
    finally:
        assert time.monotonic() - started < BOUND_SECONDS, reader
    return None


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_or_reads_each_hostile_shape_within_the_bound(
    reader: str, shape: str
) -> None:
    error = _read(reader, SHAPES[shape])
    if shape in MUST_REFUSE.get(reader, set()):
        assert error is not None, f"{reader} read {shape}"
    if isinstance(error, SourceError):
        assert SOURCE in error.source, error  # the input is named, not some other file


_ANY_INPUT = st.one_of(
    st.binary(max_size=4096),
    st.builds(
        lambda name, size, envelope: hostile.expand(hostile.marked(name, size, envelope)),
        st.sampled_from(sorted(hostile.SHAPES)),
        st.integers(0, 0xFFFF),
        st.integers(0, 4),
    ),
).filter(lambda data: len(data) <= 1 << 20)


@pytest.mark.parametrize("reader", sorted(READERS))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=_ANY_INPUT)
def test_any_input_up_to_a_megabyte_returns_or_raises_a_typed_error(
    reader: str, data: bytes
) -> None:
    _read(reader, data)


# ----------------------------------------------------------------------------- commands

runner = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "160"})
#: The file name each shape is given (what a user would name it).
FILE_NAMES = {
    "self_referencing_pickle": "_dump_0",
    "self_referencing_yaml": "rank0.json",
    "gzip_bomb_2mb": "rank0.json.gz",
    "nesting_100000": "rank0.json",
}


def _invoke(args: list[str]) -> int:
    started = time.monotonic()
    result = runner.invoke(cli, args)
    assert time.monotonic() - started < BOUND_SECONDS, args
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_commands_that_read_files_answer_within_the_bound(tmp_path: Path, shape: str) -> None:
    path = tmp_path / FILE_NAMES[shape]
    path.write_bytes(SHAPES[shape])
    nccl = _invoke(["nccl", "analyze", str(path)])
    assert nccl == (2 if shape == "self_referencing_pickle" else 0)  # else: an unknown log
    traces = _invoke(["traces", "analyze", str(path)])
    assert traces == (2 if shape == "gzip_bomb_2mb" else 1)  # else: not a Kineto trace
    yaml_file = tmp_path / "topology.yaml"
    yaml_file.write_bytes(SHAPES[shape])
    refused = 2 if shape in ("self_referencing_yaml", "nesting_100000") else None
    deploy = _invoke(["deploy", "tetragon", "--topology", str(yaml_file), "--out", str(tmp_path)])
    assert deploy == refused if refused is not None else deploy in (1, 2)
    calibrate = _invoke(["simulate", "--calibrate", str(path), "--json"])
    assert calibrate == 2
    for option in ("--topology", "--latency-table"):  # YAML files, refused whatever the shape
        assert _invoke(["simulate", option, str(yaml_file), "--json"]) == 2, option
    for option in ("--topology", "--config"):
        assert _invoke(["sensor", option, str(yaml_file), "--print-program"]) == 2, option
    summary = tmp_path / "rank-00000-steps-1-2.hpcsum"
    summary.write_bytes(SHAPES[shape])
    assert _invoke(["traces", "merge", str(summary)]) == 1  # not a summary
    summarized = _invoke(["traces", "summarize", str(path), "--out", str(tmp_path / "out")])
    assert summarized == (2 if shape == "gzip_bomb_2mb" else 1)


# ----------------------------------------------------------------------------- the server


@pytest.fixture
def server(service: Service) -> Iterator[str]:
    with live_server(create_app(service)) as url:
        yield url


def _post_file(server: str, name: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """``POST /api/traces`` with one file part, as a browser's form sends it."""
    boundary = "hostile-boundary-7d3a"
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    payload = part + body + f"\r\n--{boundary}--\r\n".encode()
    address = urllib.parse.urlsplit(server)
    connection = http.client.HTTPConnection(
        str(address.hostname), address.port, timeout=BOUND_SECONDS
    )
    try:
        connection.request(
            "POST",
            "/api/traces",
            body=payload,
            headers={**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_the_trace_upload_refuses_each_shape_and_the_server_is_idle_again(server: str) -> None:
    admin = base64.b64encode(f"admin:{DEMO_PASSWORDS['admin']}".encode()).decode()
    headers = {"Authorization": f"Basic {admin}"}
    uploads = [(shape, FILE_NAMES[shape], data) for shape, data in SHAPES.items()]
    uploads.append(("gzip_bomb_2mb", "ranks.tar.gz", hostile.tar_gzip_bomb(2 << 20)))
    for shape, name, body in uploads:
        started = time.monotonic()
        status, answer = _post_file(server, name, body, headers)
        assert time.monotonic() - started < BOUND_SECONDS, (shape, name)
        assert status in (413, 422), (shape, name, answer[:200])
        assert "error" in json.loads(answer)
    _idle_within_the_bound()


#: The other doors a body comes in by: JSON bodies of the API, and Falco's http_output.
BODIES = (
    ("POST", "/api/alerts/a1/state"),
    ("POST", "/api/tokens"),
    ("POST", "/api/traces/directory"),
    ("PUT", "/api/notify/preferences"),
    ("POST", "/api/ingest/falco"),
)


def _request(server: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> int:
    address = urllib.parse.urlsplit(server)
    connection = http.client.HTTPConnection(
        str(address.hostname), address.port, timeout=BOUND_SECONDS
    )
    try:
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


FALCO_TOKEN = "hostile-falco-token"


@pytest.fixture
def falco_server(tmp_path: Path) -> Iterator[str]:
    """A server that takes Falco's http_output (an ingest token set)."""
    settings = Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
        falco=FalcoSection(ingest_token=FALCO_TOKEN),
    )
    opened = Service.open(settings, users=demo_users())
    try:
        with live_server(create_app(opened)) as url:
            yield url
    finally:
        opened.close()


def test_every_body_and_the_directory_analysis_refuse_each_shape(
    falco_server: str, tmp_path: Path
) -> None:
    server = falco_server
    admin = base64.b64encode(f"admin:{DEMO_PASSWORDS['admin']}".encode()).decode()
    json_headers = {"Authorization": f"Basic {admin}", "Content-Type": "application/json"}
    falco_headers = {**json_headers, "Authorization": f"Bearer {FALCO_TOKEN}"}
    for shape, data in SHAPES.items():
        for method, path in BODIES:
            started = time.monotonic()
            headers = falco_headers if path == "/api/ingest/falco" else json_headers
            status = _request(server, method, path, data, headers)
            assert time.monotonic() - started < BOUND_SECONDS, (shape, path)
            # a bound crossed is 413 or 422; bytes that are not JSON at all are 400
            assert status in ((413,) if shape == "gzip_bomb_2mb" else (400, 422)), (
                shape,
                path,
                status,
            )
            if shape == "nesting_100000" and path != "/api/ingest/falco":
                assert status in (400, 422), (path, status)  # never a 500
        folder = tmp_path / shape
        folder.mkdir()
        (folder / FILE_NAMES[shape]).write_bytes(data)
        body = json.dumps({"path": str(folder)}).encode()
        status = _request(server, "POST", "/api/traces/directory", body, json_headers)
        assert status == 422, (shape, status)
    _idle_within_the_bound()


def _idle_within_the_bound() -> None:
    idle_from = time.monotonic()
    while True:  # idle: the server's threads spend under 5 % of a core for a second
        before = time.process_time()
        time.sleep(1.0)
        if time.process_time() - before < 0.05:
            break
        assert time.monotonic() - idle_from < BOUND_SECONDS, "the server did not settle"


def test_bound_errors_are_typed_source_errors() -> None:
    assert issubclass(BoundExceeded, SourceError)
