"""The Lustre server cron script, run by /bin/sh with a fake ``lctl`` on PATH that behaves as
lctl does on an OSS: it prints the OST job_stats, complains that ``mdt.*`` matches nothing and
exits non-zero."""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from hpcscope.service.collect.lustre_spool import LustreSpool
from hpcscope.store import Store
from tests.support.paths import FIXTURES, REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "lustre" / "hpcscope-jobstats"
LCTL = FIXTURES / "lustre" / "lctl_get_param_job_stats_lustre2.14_slurm_jobids_whamcloud.txt"
ARGS_EXPECTED = "get_param obdfilter.*.job_stats mdt.*.job_stats"


def _fake_lctl(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    lctl = bin_dir / "lctl"
    lctl.write_text(f"#!/bin/sh\n{body}\n")
    lctl.chmod(0o755)


def _oss_lctl(bin_dir: Path) -> None:
    _fake_lctl(
        bin_dir,
        f'[ "$*" = "{ARGS_EXPECTED}" ] || {{ echo "unexpected arguments: $*" >&2; exit 9; }}\n'
        f"cat '{LCTL}'\n"
        "echo \"error: get_param: param_path 'mdt/*/job_stats': No such file or directory\" >&2\n"
        "exit 2",
    )


def _run(*args: str, bin_dir: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    path = "/usr/bin:/bin" if bin_dir is None else f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(
        [str(SCRIPT), *args],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_real_lctl() -> None:
    # the script appends /usr/sbin:/sbin to PATH; a real lctl there would change what it runs
    assert shutil.which("lctl", path="/usr/sbin:/sbin:/usr/bin:/bin") is None


def test_writes_the_snapshot_atomically_under_the_server_name(tmp_path: Path) -> None:
    _oss_lctl(tmp_path / "bin")
    spool = tmp_path / "spool"
    done = _run("-d", str(spool), "-n", "oss1", bin_dir=tmp_path / "bin")
    assert done.returncode == 0, done.stderr
    written = spool / "oss1.job_stats"
    assert written.read_bytes() == LCTL.read_bytes()
    assert stat.S_IMODE(written.stat().st_mode) == 0o644  # readable by the collector's user
    assert sorted(p.name for p in spool.iterdir()) == ["oss1.job_stats"]  # no temp file left

    # what the collector makes of it
    with Store(tmp_path / "s.duckdb") as store:
        reads = LustreSpool(store, spool).collect_once()
        assert [(r.server, r.ok, r.rows, r.stored) for r in reads] == [("oss1", True, 240, 240)]


def test_defaults_short_hostname_and_environment_directory(tmp_path: Path) -> None:
    _oss_lctl(tmp_path / "bin")
    spool = tmp_path / "env-spool"
    spool.mkdir()
    (spool / "stale").write_text("")
    done = _run(bin_dir=tmp_path / "bin", HPCSCOPE_JOBSTATS_DIR=str(spool))
    assert done.returncode == 0, done.stderr
    short = platform.node().split(".")[0]
    assert (spool / f"{short}.job_stats").read_bytes() == LCTL.read_bytes()


def test_a_second_run_replaces_the_file(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _fake_lctl(tmp_path / "bin", "echo 'obdfilter.fs-OST0000.job_stats='; echo 'job_stats:'")
    assert _run("-d", str(spool), "-n", "oss1", bin_dir=tmp_path / "bin").returncode == 0
    first = (spool / "oss1.job_stats").stat().st_ino
    _oss_lctl(tmp_path / "bin")
    assert _run("-d", str(spool), "-n", "oss1", bin_dir=tmp_path / "bin").returncode == 0
    assert (spool / "oss1.job_stats").read_bytes() == LCTL.read_bytes()
    assert (spool / "oss1.job_stats").stat().st_ino != first  # renamed into place


def test_without_lctl_it_says_so_and_succeeds(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    done = _run("-d", str(spool), bin_dir=None)
    assert done.returncode == 0
    assert "lctl not found" in done.stderr
    assert not spool.exists()


def test_a_failing_lctl_keeps_the_previous_snapshot(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    previous = spool / "mds1.job_stats"
    previous.write_text("job_stats:\n")
    _fake_lctl(tmp_path / "bin", "echo 'error: get_param: Permission denied' >&2\nexit 13")
    done = _run("-d", str(spool), "-n", "mds1", bin_dir=tmp_path / "bin")
    assert done.returncode == 1
    assert "lctl get_param failed (exit 13): error: get_param: Permission denied" in done.stderr
    assert previous.read_text() == "job_stats:\n"
    assert sorted(p.name for p in spool.iterdir()) == ["mds1.job_stats"]


@pytest.mark.parametrize("args", [["-x"], ["extra"], ["-n", "../etc"], ["-n", ".hidden"]])
def test_usage_errors(tmp_path: Path, args: list[str]) -> None:
    _oss_lctl(tmp_path / "bin")
    done = _run("-d", str(tmp_path / "spool"), *args, bin_dir=tmp_path / "bin")
    assert done.returncode == 2
    assert not (tmp_path / "spool").exists()


def test_script_is_posix_sh() -> None:
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")
    assert os.access(SCRIPT, os.X_OK)
    checked = subprocess.run(["dash", "-n", str(SCRIPT)], capture_output=True, check=False)
    assert checked.returncode == 0, checked.stderr
