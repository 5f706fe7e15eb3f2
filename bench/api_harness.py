"""The API load harness shared by ``bench/api_load.py`` and ``bench/soak.py``.

What it does, as a browser fleet and its scripts would: starts ``hpcscope demo`` (the server,
with the collector scraping the digital twin of a topology: the 128-node
``topologies/128x8-h100.yaml`` by default, or the demo's 16 GPUs, ``2x8-h100``) as a real
subprocess on loopback, authenticates every client (``--auth``: the login form's session cookie,
HTTP Basic on every request, or an API token made for each user) once the demo has written its
month of history and its collector scrapes the twin (:func:`collecting`), and runs N concurrent
clients, each on its own keep-alive HTTP/1.1 connection (raw asyncio streams: the generator
must cost the shared CPUs little), over the GET routes of :mod:`bench.api_routes` (one route,
or their weighted mix). A poll sends the ``If-None-Match`` of the client's last answer of that
route, as the pages' scripts and htmx do.

Latency is per request, from the first byte written to the last byte of the body read (a 304
counts as a good answer). An error is a status outside 200-399, a broken connection or a
request over ``--timeout-seconds``. Server CPU and RSS come from ``/proc/<pid>`` of the demo
process, which is the server (the twin is its child, not counted).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from bench.api_routes import BY_NAME, MIX, Route

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "128x8-h100.yaml"
#: ``--topology`` names: the 128-node twin, and the demo's 16 GPUs.
TOPOLOGIES = {"128": TOPOLOGY, "16": ROOT / "topologies" / "2x8-h100.yaml"}
AUTH_MODES = ("cookie", "basic", "token")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (``/proc/<pid>/statm``)."""
    resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return resident_pages * PAGE_BYTES / 2**20


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds every process of the machine spent so far, all cores together
    (``/proc/stat``: everything but idle and I/O wait)."""
    ticks = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def exit_on_sigterm() -> None:
    """A bounded run (``timeout``) ends by SIGTERM: exit through the :class:`Demo`'s clean-up,
    which stops the server and the twin (their own session: they would run on, orphaned, and
    slow every later run), also while the demo starts (its history at 128 nodes takes
    minutes)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


class Demo:
    """``hpcscope demo`` on the 128-node twin, as a subprocess; a context manager (call
    :func:`exit_on_sigterm` first in a bench's ``main``)."""

    def __init__(
        self,
        *,
        port: int,
        scrape_interval_seconds: float = 2.0,
        topology: Path = TOPOLOGY,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port
        self.env = dict(env or {})
        self.topology = topology
        self.scrape_interval_seconds = scrape_interval_seconds
        self._dir = tempfile.TemporaryDirectory(prefix="hpcscope-load-", ignore_cleanup_errors=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.logins: list[tuple[str, str]] = []

    def __enter__(self) -> Demo:
        path = f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"
        env = dict(os.environ, PYTHONPATH=path) | self.env
        command = [
            sys.executable,
            "-m",
            "hpcscope",
            "demo",
            "--json",
            "--port",
            str(self.port),
            "--topology",
            str(self.topology),
            "--state-dir",
            self._dir.name,
            "--scrape-interval",
            str(self.scrape_interval_seconds),
        ]
        log = Path(self._dir.name) / "demo.log"
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            env=env,
            cwd=ROOT,
            start_new_session=True,  # its own process group: the twin goes with it at the end
        )
        assert self.process.stdout is not None
        text, deadline = b"", time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"demo exited: {log.read_text(errors='replace')[-2000:]}")
            ready, _, _ = select.select([self.process.stdout], [], [], 0.5)
            if ready:
                text += os.read(self.process.stdout.fileno(), 65536)
                try:
                    info = json.loads(text)
                except json.JSONDecodeError:
                    continue
                self.logins = [(d["user"], d["password"]) for d in info["logins"]]
                self._wait_until_answering(deadline)
                return self
        raise RuntimeError("demo did not print its URL within 180 s")

    def _wait_until_answering(self, deadline: float) -> None:
        """The demo prints its URL first and answers a moment later: until ``/healthz``."""
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    if sock.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError("the demo did not answer /healthz within 180 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            # the whole group: a demo stopped by a signal may leave its twin running, and a
            # leftover twin (about 12 % of a core) would slow every later run
            group = self.process.pid  # start_new_session: the group's id is the demo's pid
            for sig, wait_seconds in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(group, sig)
                except ProcessLookupError:
                    break  # the whole group is gone
                try:
                    self.process.wait(timeout=wait_seconds)
                except subprocess.TimeoutExpired:
                    pass
                time.sleep(1)  # the twin's own clean exit, before the group is killed
        self._dir.cleanup()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


class Connection:
    """One keep-alive HTTP/1.1 connection to the server on loopback."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        answer: dict[str, list[str]] = {}
        for line in header_lines:
            if line:
                key, _, value = line.partition(":")
                answer.setdefault(key.strip().lower(), []).append(value.strip())
        if "content-length" in answer:
            payload = await self.reader.readexactly(int(answer["content-length"][0]))
        elif "chunked" in answer.get("transfer-encoding", [""])[0]:
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                parts.append(await self.reader.readexactly(size + 2))
                if size == 0:
                    break
            payload = b"".join(p[:-2] for p in parts)
        else:
            payload = b""
        if "close" in answer.get("connection", [""])[0].lower():
            self.close()
        return status, {k: ";".join(v) for k, v in answer.items()} | _cookies(answer), payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _cookies(answer: dict[str, list[str]]) -> dict[str, str]:
    pairs = [c.split(";", 1)[0] for c in answer.get("set-cookie", [])]
    return {"cookie": "; ".join(pairs)} if pairs else {}


@dataclass
class Client:
    """One simulated browser or script: who it is, how it authenticates, what it may see."""

    user: str
    password: str = ""
    auth: str = "cookie"
    cookie: str = ""
    token: str = ""
    job_ids: list[str] = field(default_factory=list)
    analysis_ids: list[str] = field(default_factory=list)
    etags: dict[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        """The credentials this client sends with every request (``--auth``)."""
        if self.auth == "basic":
            secret = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {secret}"}
        if self.auth == "token":
            return {"Authorization": f"Bearer {self.token}"}
        return {"Cookie": self.cookie}


@dataclass(frozen=True, slots=True)
class Place:
    """What the routes' paths name besides jobs: a node, a GPU element, the checkpoint root."""

    node: str
    element: str
    path: str

    @classmethod
    def of(cls, topology: Path) -> Place:
        from hpcscope.model.topology import load_topology

        loaded = load_topology(topology)
        node = loaded.nodes[0].name
        return cls(node=node, element=f"gpu-{node}-0", path=loaded.checkpoint_root)


@dataclass
class Tally:
    """Latencies (seconds) per endpoint and the errors seen, over one measured window."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)

    def add(self, name: str, seconds: float, ok: bool, detail: str = "") -> None:
        self.latencies.setdefault(name, []).append(seconds)
        if not ok:
            self.errors[name] = self.errors.get(name, 0) + 1
            if len(self.samples) < 5:
                self.samples.append(f"{name}: {detail}")

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def all_latencies(self) -> list[float]:
        return [s for v in self.latencies.values() for s in v]


def percentile_ms(seconds: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1, nearest rank) of ``seconds``, in milliseconds."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


async def log_in(port: int, user: str, password: str, *, auth: str = "cookie") -> Client:
    """``POST /login`` as the login form does (and, for ``token``, ``POST /api/tokens``); the
    client with its credentials, visible jobs and trace analyses."""
    connection = Connection(port)
    body = urllib.parse.urlencode({"username": user, "password": password, "next": "/"})
    origin = f"http://127.0.0.1:{port}"
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin}
    status, answer, _ = await connection.request("POST", "/login", headers, body.encode())
    if status != 303 or "cookie" not in answer:
        raise RuntimeError(f"login of {user} answered {status}")
    client = Client(user=user, password=password, auth=auth, cookie=answer["cookie"])
    if auth == "token":
        wanted = json.dumps({"label": "api-load", "scope": "read", "expires_days": 1}).encode()
        made = {"Cookie": client.cookie, "Origin": origin, "Content-Type": "application/json"}
        status, _, payload = await connection.request("POST", "/api/tokens", made, wanted)
        if status != 201:
            raise RuntimeError(f"token of {user} answered {status}: {payload[:200]!r}")
        client.token = json.loads(payload)["secret"]
    status, _, payload = await connection.request("GET", "/api/jobs", client.headers())
    client.job_ids = [j["job_id"] for j in json.loads(payload)["jobs"]] if status == 200 else []
    status, _, payload = await connection.request("GET", "/api/traces", client.headers())
    if status == 200:
        client.analysis_ids = [a["analysis_id"] for a in json.loads(payload)["analyses"]]
    connection.close()
    return client


def path_of(route: Route, client: Client, place: Place, rng: random.Random) -> str | None:
    """The route's path for this client, or None when it names nothing the client has (a job
    or an analysis it may see)."""
    values = {"node": place.node, "element": place.element, "path": place.path}
    if "{job}" in route.path:
        if not client.job_ids:
            return None
        values["job"] = rng.choice(client.job_ids)
    if "{analysis}" in route.path:
        if not client.analysis_ids:
            return None
        values["analysis"] = rng.choice(client.analysis_ids)
    return route.path.format(**values)


def asks(route: Route, client: Client) -> bool:
    """Whether this client asks for this route at all (no page by API token; an admin route
    by admins)."""
    return not (route.page and client.auth == "token") and (
        not route.admin or client.user == "admin"
    )


async def run_client(
    port: int,
    client: Client,
    *,
    until: float,
    tally: list[Tally],
    seed: int,
    think_seconds: float,
    timeout_seconds: float,
    place: Place,
    mix: tuple[tuple[str, int], ...] = MIX,
) -> None:
    """Send the weighted ``mix`` until ``until`` (monotonic); ``tally[0]`` is the current
    window. A route the client does not ask for (:func:`asks`), or that names nothing it has,
    is skipped."""
    rng = random.Random(seed)
    routes = [BY_NAME[name] for name, _ in mix if asks(BY_NAME[name], client)]
    weights = [weight for name, weight in mix if asks(BY_NAME[name], client)]
    connection = Connection(port)
    while routes and time.monotonic() < until:
        route = rng.choices(routes, weights)[0]
        path = path_of(route, client, place, rng)
        if path is None:
            route = BY_NAME["job_list"]  # a user with no jobs yet looks at the (empty) list
            path = route.path
        headers = {**client.headers(), "Accept": "*/*"}
        etag = client.etags.get(path)
        if etag:
            headers["If-None-Match"] = etag
        start = time.perf_counter()
        try:
            status, answer, _ = await asyncio.wait_for(
                connection.request("GET", path, headers), timeout_seconds
            )
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            tally[0].add(route.name, time.perf_counter() - start, False, f"{type(exc).__name__}")
            connection.close()
            continue
        ok = 200 <= status < 400
        tally[0].add(route.name, time.perf_counter() - start, ok, f"HTTP {status} {path}")
        if "etag" in answer:
            client.etags[path] = answer["etag"]
        if think_seconds:
            await asyncio.sleep(rng.uniform(0.5, 1.5) * think_seconds)
    connection.close()


def summary(tally: Tally, seconds: float) -> dict[str, object]:
    """The figures of one window: requests, errors, rps, percentiles overall and per endpoint."""
    every = tally.all_latencies()
    return {
        "requests": tally.requests,
        "errors": sum(tally.errors.values()),
        "rps": round(tally.requests / seconds, 1) if seconds else None,
        "p50_ms": percentile_ms(every, 0.50),
        "p90_ms": percentile_ms(every, 0.90),
        "p99_ms": percentile_ms(every, 0.99),
        "max_ms": percentile_ms(every, 1.0),
        "p50_by_endpoint_ms": {k: percentile_ms(v, 0.5) for k, v in tally.latencies.items()},
        "p90_by_endpoint_ms": {k: percentile_ms(v, 0.9) for k, v in tally.latencies.items()},
        "p99_by_endpoint_ms": {k: percentile_ms(v, 0.99) for k, v in tally.latencies.items()},
        "max_by_endpoint_ms": {k: percentile_ms(v, 1.0) for k, v in tally.latencies.items()},
        "requests_by_endpoint": {k: len(v) for k, v in tally.latencies.items()},
        "errors_by_endpoint": dict(tally.errors),
        "error_samples": list(tally.samples),
    }


def admin_login(demo: Demo) -> tuple[str, str]:
    """The demo's admin user and password."""
    return next(u for u in demo.logins if u[0] == "admin")


async def metric_families(port: int, admin: Client) -> list[Metric] | None:
    """The server's ``/metrics``, asked as ``admin`` on a connection of its own; None when it
    does not answer 200."""
    connection = Connection(port)
    try:
        status, _, payload = await connection.request("GET", "/metrics", admin.headers())
    finally:
        connection.close()
    if status != 200:
        return None
    return list(text_string_to_metric_families(payload.decode()))


async def collecting(demo: Demo, admin: Client, *, deadline: float) -> None:
    """Until the collector scrapes the live twin: the demo first writes a month of history
    (minutes at 128 nodes, while it already answers), and a measure taken then would measure
    the history's writing."""
    while time.monotonic() < deadline:
        # a connection per probe: the server closes one idle for its keep-alive timeout (5 s),
        # and a probe sent as it does reads nothing
        connection = Connection(demo.port)
        try:
            status, _, payload = await connection.request("GET", "/api/cluster", admin.headers())
        finally:
            connection.close()
        if status == 200 and json.loads(payload).get("targets"):
            return
        await asyncio.sleep(5)
    raise RuntimeError("the demo's collector did not start scraping in time")


async def prepare_clients(
    demo: Demo,
    count: int,
    *,
    wait_for_jobs_seconds: float,
    auth: str = "cookie",
    wait_for_collection_seconds: float = 1200.0,
) -> list[Client]:
    """Authenticate ``count`` clients (round robin over the demo logins) once the twin's jobs
    show and the collector scrapes it (:func:`collecting`); one token per user for ``token``,
    shared by that user's clients."""
    admin = admin_login(demo)
    deadline = time.monotonic() + wait_for_jobs_seconds
    while time.monotonic() < deadline:  # the collector needs a scrape and a scheduler poll
        probe = await log_in(demo.port, *admin)
        if len(probe.job_ids) >= 4:
            break
        await asyncio.sleep(2)
    await collecting(demo, probe, deadline=time.monotonic() + wait_for_collection_seconds)
    made: dict[str, Client] = {}
    for user, password in demo.logins:
        made[user] = await log_in(demo.port, user, password, auth=auth)
    clients = []
    for i in range(count):
        user = demo.logins[i % len(demo.logins)][0]
        first = made[user]
        clients.append(
            Client(
                user=first.user,
                password=first.password,
                auth=auth,
                cookie=first.cookie,
                token=first.token,
                job_ids=list(first.job_ids),
                analysis_ids=list(first.analysis_ids),
            )
        )
    return clients
