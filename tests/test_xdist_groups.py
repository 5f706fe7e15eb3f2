"""``make test`` runs three xdist workers with ``--dist loadgroup``: the groups of
``tests/conftest.py`` hold (the machine-wide tests on one worker, one after the other; a
module's tests that share a module fixture on one worker, which builds the fixture once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT

SHARED = """
import os
import pytest

@pytest.fixture(scope="module")
def built():
    with open(os.path.join(os.path.dirname(__file__), "built.txt"), "a") as out:
        out.write(f"{os.getpid()}\\n")

@pytest.mark.parametrize("n", range(6))
def test_shared(built, n):
    pass
"""
SENSOR = """
import os
import pytest

@pytest.mark.parametrize("n", range(3))
def test_machine_wide(n):
    with open(os.path.join(os.path.dirname(__file__), "machine-wide.txt"), "a") as out:
        out.write(f"{os.getpid()}\\n")
"""


def test_groups_hold_on_three_workers(tmp_path: Path) -> None:
    (tmp_path / "test_shared_fixture.py").write_text(SHARED)
    (tmp_path / "test_sensor_one.py").write_text(SENSOR)
    (tmp_path / "test_sensor_two.py").write_text(SENSOR)
    args = [
        "-n",
        "3",
        "--dist",
        "loadgroup",
        "-p",
        "tests.support.xdist_groups",
        "-p",
        "no:randomly",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'src'}{os.pathsep}{REPO_ROOT}"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "12 passed" in result.stdout, result.stdout[-3000:]
    built = (tmp_path / "built.txt").read_text().split()
    assert len(built) == 1, f"the module fixture was built by {len(built)} workers"
    workers = set((tmp_path / "machine-wide.txt").read_text().split())
    assert len(workers) == 1, f"machine-wide tests ran on {len(workers)} workers"
