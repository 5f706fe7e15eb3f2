"""The Tetragon export events ``hpcscope sensor`` writes, as types (``docs/security.md``,
"Tetragon event shapes the rules read"): protojson's field names, 64-bit integers
(``size_arg``) as strings, absent fields left out."""

from __future__ import annotations

from typing import TypedDict


class SlurmJobJson(TypedDict):
    """hpcscope's extension of ``process``: the job the sensor resolved."""

    job_id: str | None
    job_sluid: str | None
    step: str | None
    source: str


class ProcessJson(TypedDict, total=False):
    exec_id: str
    pid: int
    uid: int
    cwd: str
    binary: str
    arguments: str
    flags: str
    start_time: str
    auid: int
    tid: int
    parent_exec_id: str
    slurm_job: SlurmJobJson


class ParentJson(TypedDict):
    exec_id: str
    pid: int
    binary: str
    arguments: str
    uid: int | None


class FileValue(TypedDict, total=False):
    path: str
    permission: str


class SockValue(TypedDict, total=False):
    family: str
    type: str
    protocol: str
    daddr: str | None
    dport: int | None


class CredentialsValue(TypedDict, total=False):
    uid: int
    euid: int
    gid: int
    egid: int


class ModuleValue(TypedDict, total=False):
    name: str
    tainted: list[str]


class FileArg(TypedDict):
    file_arg: FileValue


class IntArg(TypedDict):
    int_arg: int | None


class UintArg(TypedDict):
    uint_arg: int


class SizeArg(TypedDict):
    size_arg: str


class StringArg(TypedDict):
    string_arg: str


class SockArg(TypedDict):
    sock_arg: SockValue


class CredentialsArg(TypedDict):
    process_credentials_arg: CredentialsValue


class ModuleArg(TypedDict):
    module_arg: ModuleValue


KprobeArg = FileArg | IntArg | UintArg | SizeArg | StringArg | SockArg | CredentialsArg | ModuleArg

# "return" is a Python keyword: the functional form
KprobeJson = TypedDict(
    "KprobeJson",
    {
        "process": ProcessJson,
        "parent": ParentJson,
        "function_name": str,
        "args": list[KprobeArg],
        "return": IntArg,
        "action": str,
        "policy_name": str,
    },
    total=False,
)


class ExecJson(TypedDict, total=False):
    process: ProcessJson
    parent: ParentJson


class KprobeEvent(TypedDict):
    process_kprobe: KprobeJson
    node_name: str
    time: str


class ExecEvent(TypedDict):
    process_exec: ExecJson
    node_name: str
    time: str


TetragonEvent = KprobeEvent | ExecEvent
