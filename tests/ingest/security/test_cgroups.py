"""Slurm job from cgroup paths: v1, v2 job_<id>, v2 SLUID (Slurm >= 26.05), Falco's string."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.cgroups import (
    parse_slurm_cgroup_path,
    slurm_job_from_falco_cgroups,
    slurm_job_from_proc_cgroup,
)
from hpcscope.model.security_events import SlurmCgroup

CB32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/slurm/uid_1000/job_5151/step_batch/task_0", SlurmCgroup("5151", None, "batch")),
        ("/slurm_gpu01/uid_0/job_7/step_extern", SlurmCgroup("7", None, "extern")),
        (
            "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0",
            SlurmCgroup("4242", None, "0"),
        ),
        ("/system.slice/slurmstepd.scope/job_12", SlurmCgroup("12", None, None)),
        (
            "/system.slice/gpu01_slurmstepd.scope/sEKNKTV3WPV500/step_3/user/task_1",
            SlurmCgroup(None, "sEKNKTV3WPV500", "3"),
        ),
        ("/user.slice/user-1000.slice/session-3.scope", None),
        ("/", None),
        ("", None),
        # A SLUID-looking directory elsewhere is not a job.
        ("/user.slice/sEKNKTV3WPV500", None),
        # job_ must be the whole directory name.
        ("/home/job_runner/x", None),
    ],
)
def test_cgroup_path_layouts(path: str, expected: SlurmCgroup | None) -> None:
    assert parse_slurm_cgroup_path(path) == expected


def test_falco_thread_cgroups_string() -> None:
    value = (
        "cpuset=/system.slice/slurmstepd.scope/job_99/step_0 cpu=/system.slice/slurmstepd.scope"
        "/job_99/step_0 memory=/system.slice/slurmstepd.scope/job_99/step_0"
    )
    assert slurm_job_from_falco_cgroups(value) == SlurmCgroup("99", None, "0")
    assert slurm_job_from_falco_cgroups("cpuset=/ cpu=/user.slice") is None
    assert slurm_job_from_falco_cgroups("<NA>") is None
    assert slurm_job_from_falco_cgroups(None) is None


def test_proc_cgroup_file_v1_takes_any_controller() -> None:
    text = "12:pids:/slurm/uid_1000/job_5/step_0/task_0\n1:name=systemd:/system.slice/x\n"
    assert slurm_job_from_proc_cgroup(text) == SlurmCgroup("5", None, "0")
    assert slurm_job_from_proc_cgroup("garbage\n0::/init.scope\n") is None


_STEP = st.one_of(
    st.integers(0, 10_000).map(str), st.sampled_from(["batch", "extern", "interactive"])
)


@given(
    job=st.integers(1, 2**32 - 1),
    step=_STEP,
    uid=st.integers(0, 2**31),
    layout=st.sampled_from(["v1", "v2", "v2-node"]),
)
def test_job_id_paths_round_trip(job: int, step: str, uid: int, layout: str) -> None:
    path = {
        "v1": f"/slurm/uid_{uid}/job_{job}/step_{step}/task_0",
        "v2": f"/system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_0",
        "v2-node": f"/system.slice/n1_slurmstepd.scope/job_{job}/step_{step}/slurm",
    }[layout]
    assert parse_slurm_cgroup_path(path) == SlurmCgroup(str(job), None, step)
    falco = f"cpuset={path} memory={path}"
    assert slurm_job_from_falco_cgroups(falco) == SlurmCgroup(str(job), None, step)


@given(value=st.integers(0, 2**64 - 1), step=_STEP)
def test_sluid_paths_round_trip(value: int, step: str) -> None:
    # Slurm's print_sluid: "s" then 13 base32 digits, most significant first.
    sluid = "s" + "".join(CB32[(value >> (5 * i)) & 0x1F] for i in reversed(range(13)))
    path = f"/system.slice/slurmstepd.scope/{sluid}/step_{step}/user/task_0"
    assert parse_slurm_cgroup_path(path) == SlurmCgroup(None, sluid, step)


@given(text=st.text(max_size=200))
def test_any_text_returns_a_job_or_none(text: str) -> None:
    found = slurm_job_from_proc_cgroup(text)
    assert found is None or isinstance(found, SlurmCgroup)
    found = slurm_job_from_falco_cgroups(text)
    assert found is None or isinstance(found, SlurmCgroup)
