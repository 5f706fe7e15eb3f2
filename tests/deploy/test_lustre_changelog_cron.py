"""The MDS changelog script, run by /bin/sh with a fake ``lfs`` on PATH; the server's
ChangelogSpool reads what it appended, each record once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpcscope.service.telemetry_rules.spool import ChangelogSpool
from hpcscope.store import Store
from hpcscope.store import telemetry_rules as queries
from tests.support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "lustre" / "hpcscope-changelog"
RECORDS = (
    "7 01CREAT 12:00:00.000000000 2026.12.01 0x0 t=[0x1:0x2:0x0] j=7:0:gpu01 ef=0xf u=1:1 "
    "nid=0@lo p=[0x1:0x1:0x0] a\n"
    "8 06UNLNK 12:00:01.000000000 2026.12.01 0x1 t=[0x1:0x2:0x0] j=8:0:gpu02 ef=0xf u=2:2 "
    "nid=0@lo p=[0x1:0x1:0x0] a\n"
)


def _fake_lfs(bin_dir: Path, cleared: Path) -> None:
    bin_dir.mkdir()
    (bin_dir / "records").write_text(RECORDS)
    tool = bin_dir / "lfs"
    tool.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  changelog) [ \"$2\" = fs-MDT0000 ] || exit 3; cat '{bin_dir / 'records'}' ;;\n"
        f"  changelog_clear) echo \"$2 $3 $4\" >> '{cleared}' ;;\n"
        '  *) echo "unexpected $*" >&2; exit 9 ;;\n'
        "esac\n"
    )
    tool.chmod(0o755)


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_appends_clears_and_the_spool_stores_each_record_once(tmp_path: Path) -> None:
    cleared = tmp_path / "cleared"
    _fake_lfs(tmp_path / "bin", cleared)
    spool = tmp_path / "spool"
    with Store(tmp_path / "s.duckdb") as store:
        reader = ChangelogSpool(store, spool)
        for _ in range(2):  # the second run sees the same records (a crash before the clear)
            result = _run(tmp_path, "-u", "cl1", "-d", str(spool), "fs-MDT0000")
            assert result.returncode == 0, result.stderr
            reader.collect_once()
        assert cleared.read_text() == "fs-MDT0000 cl1 8\n" * 2
        rows = queries.changelog(store).to_pylist()
        assert [(r["record_index"], r["record_type"], r["job_id"]) for r in rows] == [
            (7, "CREAT", "7"), (8, "UNLNK", "8")
        ]  # fmt: skip


def test_usage_and_a_failing_mdt(tmp_path: Path) -> None:
    _fake_lfs(tmp_path / "bin", tmp_path / "cleared")
    assert _run(tmp_path, "fs-MDT0000").returncode == 2  # no -u
    failed = _run(tmp_path, "-u", "cl1", "-d", str(tmp_path / "spool"), "other-MDT0001")
    assert failed.returncode == 1 and "failed" in failed.stderr
    assert not (tmp_path / "cleared").exists()
