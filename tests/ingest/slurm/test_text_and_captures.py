"""squeue/sinfo text (real captures of 22.05, 24.11, 25.05, 25.11, 26.05) and the real 22.05
slurmrestd v0.0.37/v0.0.38 responses captured from the test cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcscope.ingest.slurm import (
    SchedulerFormatError,
    parse_gres,
    parse_sinfo_nodes_text,
    parse_sinfo_partitions_text,
    parse_slurmrestd_jobs,
    parse_slurmrestd_nodes,
    parse_slurmrestd_partitions,
    parse_squeue_text,
    squeue_format_argument,
)
from tests.support.paths import FIXTURES

SLURM = FIXTURES / "slurm"
DEB = SLURM / "debian-22.05"
SCKYZO = SLURM / "cli_text_sckyzo"
EXPORTER_SQUEUE = [
    "JobID",
    "Account",
    "UserName",
    "Partition",
    "State",
    "NumNodes",
    "NumCPUs",
    "tres-alloc",
]
MAPPING = json.loads((DEB / "mapping_dir_while_running.json").read_text())


def test_squeue_format_argument_matches_the_captured_command() -> None:
    manifest = json.loads((DEB / "MANIFEST.json").read_text())
    assert squeue_format_argument() in manifest["files"]["squeue_hpcscope.txt"]


def test_squeue_text_real_22_05() -> None:
    snap = parse_squeue_text((DEB / "squeue_hpcscope.txt").read_text(), source="squeue")
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert sorted(rows) == ["1", "2", "3_1", "3_2", "4", "5", "6", "7", "9+0", "9+1"]
    assert rows["1"]["gpus"] == 2 and rows["1"]["state"] == "RUNNING"
    assert rows["5"]["eligible_time"] is None  # held: EligibleTime N/A
    assert rows["9+1"]["start_time"] is None  # pending: StartTime is only an estimate
    assert {r["raw_job_id"]: r["job_id"] for r in snap.aliases.to_pylist()} == {
        "3": "3_2",
        "8": "3_1",
        "9": "9+0",
        "10": "9+1",
    }
    assert snap.warnings == []


@pytest.mark.parametrize(
    ("path", "jobs"),
    [
        (DEB / "squeue_jobs.txt", 10),
        (SCKYZO / "slurm-24.11.7" / "squeue_jobs.txt", 15),
        (SCKYZO / "slurm-26.05.2" / "squeue_jobs.txt", 14),
    ],
)
def test_squeue_text_exporter_format(path: Path, jobs: int) -> None:
    snap = parse_squeue_text(path.read_text(), source=str(path), fields=EXPORTER_SQUEUE)
    assert snap.jobs.num_rows == jobs
    assert snap.warnings == []


def test_squeue_text_old_two_column_format() -> None:
    snap = parse_squeue_text(
        (SLURM / "cli_text_vpenso" / "squeue.txt").read_text(),
        source="squeue",
        fields=["JobID", "State"],
        separator=",",
    )
    assert snap.jobs.num_rows == 42


def test_squeue_text_wrong_field_list_is_an_error() -> None:
    with pytest.raises(SchedulerFormatError):
        parse_squeue_text((DEB / "squeue_hpcscope.txt").read_text(), source="x", fields=["JobID"])


def test_sinfo_nodes_merge_partitions_and_read_gres() -> None:
    snap = parse_sinfo_nodes_text(
        (SCKYZO / "slurm-25.05" / "node_detail_gres.txt").read_text(), source="sinfo"
    )
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["a001"].partitions == ("gpu", "gpu2", "gpu3", "gpu4")
    assert nodes["a001"].gpu_indices_used == (0, 1, 2, 3)
    assert nodes["a002"].states == ("DRAINED", "NOT_RESPONDING")  # "drained*"
    multi = parse_sinfo_nodes_text(
        (SCKYZO / "slurm-25.11.2" / "node_detail_gres_multitype.txt").read_text(), source="s"
    )
    node = multi.nodes[0]
    assert node.gpus == 4 and node.gpus_used == 1 and node.gpu_indices_used == (2,)
    cpu_only = parse_sinfo_nodes_text(
        (SCKYZO / "slurm-24.11.7" / "node_detail.txt").read_text(), source="s"
    )
    assert len(cpu_only.nodes) == 20
    by_name = {n.name: n for n in cpu_only.nodes}
    assert by_name["na1"].gpus == 0 and by_name["na1"].gres == ()  # (null) GRES
    assert cpu_only.nodes[0].partitions[0] == "cpu"  # "cpu*" default marker dropped


def test_sinfo_real_22_05_and_partitions() -> None:
    snap = parse_sinfo_nodes_text((DEB / "sinfo_node_detail.txt").read_text(), source="s")
    assert [(n.name, n.gpus, n.gpus_used) for n in snap.nodes] == [("hpcs-node01", 8, 7)]
    parts = parse_sinfo_partitions_text((DEB / "sinfo_partitions.txt").read_text(), source="p")
    assert [(p.name, p.is_default, p.max_time_seconds) for p in parts.partitions] == [
        ("gpu", True, 3600)
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:model_a:2(IDX:0,3)", [("gpu", "model_a", 2, (0, 3))]),
        ("gpu:model_a:0(IDX:N/A)", [("gpu", "model_a", 0, None)]),
        ("gpu:8(S:0-1)", [("gpu", None, 8, None)]),
        ("gpu:1g.10gb:9(IDX:0-3,5-9)", [("gpu", "1g.10gb", 9, (0, 1, 2, 3, 5, 6, 7, 8, 9))]),
        ("gpu:a:2,gpu:b:2", [("gpu", "a", 2, None), ("gpu", "b", 2, None)]),
        ("(null)", []),
        ("gpu:0", [("gpu", None, 0, None)]),
    ],
)
def test_gres_strings(text: str, expected: list[tuple[object, ...]]) -> None:
    got = [(e.name, e.type, e.count, e.indices) for e in parse_gres(text)]
    assert got == expected


@pytest.mark.parametrize("name", ["restd_v0.0.38_jobs.json", "restd_v0.0.37_jobs.json"])
def test_real_slurmrestd_22_05_jobs_and_gres_detail(name: str) -> None:
    snap = parse_slurmrestd_jobs((DEB / name).read_bytes(), source=name)
    assert snap.warnings == []
    assert snap.jobs.num_rows == 10
    held: dict[str, list[str]] = {}
    for row in snap.allocations.to_pylist():
        held.setdefault(str(row["gpu"]), []).append(row["job_id"])
    # the GPUs slurmctld reports are exactly the ones the prolog labelled (array task 3_1 is
    # raw job 8 in the mapping file)
    raw_to_id = {r["raw_job_id"]: r["job_id"] for r in snap.aliases.to_pylist()}
    labelled = {gpu: [raw_to_id.get(c.strip(), c.strip())] for gpu, c in MAPPING.items()}
    assert held == labelled


def test_real_slurmrestd_finished_jobs_exit_codes() -> None:
    snap = parse_slurmrestd_jobs(
        (DEB / "restd_v0.0.38_jobs_finished.json").read_bytes(), source="restd"
    )
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert rows["2"]["exit_code"] == 3  # wait status 768
    assert rows["6"]["exit_code"] == 128 + 15  # cancelled: SIGTERM
    assert rows["5"]["start_time"] is None  # cancelled while held
    assert snap.allocations.num_rows == 0  # gres_detail is empty once jobs end


def test_real_slurmrestd_nodes_partitions_and_sinfo_json() -> None:
    nodes = parse_slurmrestd_nodes((DEB / "restd_v0.0.38_nodes.json").read_bytes(), source="n")
    assert [(n.name, n.gpus, n.cpus) for n in nodes.nodes] == [("hpcs-node01", 8, 16)]
    assert nodes.warnings == ()
    sinfo = parse_slurmrestd_nodes((DEB / "sinfo.json").read_bytes(), source="sinfo --json")
    assert sinfo.nodes[0].gpus == 8
    parts = parse_slurmrestd_partitions(
        (DEB / "restd_v0.0.38_partitions.json").read_bytes(), source="p"
    )
    assert [(p.name, p.is_default, p.max_time_seconds, p.total_cpus) for p in parts.partitions] == [
        ("gpu", True, 3600, 16)
    ]
