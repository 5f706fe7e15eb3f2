"""The training-side capture: settings, the window state machine, and a real torch run
switched on by the environment alone (``deploy/slurm/capture/sitecustomize.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.capture import Capture, CaptureSettings, install_from_env
from hpcscope.ingest.traces.kineto import read_kineto
from hpcscope.model.capture import META_PATTERN, CaptureMeta, CaptureMetaError, parse_schedule
from hpcscope.model.errors import ConfigError
from tests.support.paths import REPO_ROOT

SITE = REPO_ROOT / "deploy" / "slurm" / "capture"


class FakeProfiler:
    """What :class:`Capture` drives: start, step (calling the schedule), stop, export."""

    def __init__(self, schedule: Any, ready: Any) -> None:
        self.schedule, self.ready = schedule, ready
        self.step_num = 0
        self.current_action: Any = None
        self.started = self.stopped = False
        self.exported: list[str] = []

    def start(self) -> None:
        self.started = True

    def step(self) -> None:
        from torch.profiler import ProfilerAction

        before = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if before is ProfilerAction.RECORD_AND_SAVE:
            self.ready(self)

    def stop(self) -> None:
        self.stopped = True

    def export_chrome_trace(self, path: str) -> None:
        self.exported.append(path)
        Path(path).write_text('{"traceEvents": []}')


def test_settings_come_from_the_environment(tmp_path: Path) -> None:
    assert CaptureSettings.from_env({}) is None
    settings = CaptureSettings.from_env(
        {
            "HPCSCOPE_CAPTURE": "1",
            "HPCSCOPE_CAPTURE_SPOOL": str(tmp_path),
            "HPCSCOPE_CAPTURE_SCHEDULE": "2,1,5",
            "HPCSCOPE_CAPTURE_EVERY_SECONDS": "120",
            "HPCSCOPE_CAPTURE_FIRST_STEP": "7",
            "SLURM_JOB_ID": "4242",
        }
    )
    assert settings == CaptureSettings(tmp_path, "4242", (2, 1, 5), 120.0, 7)
    assert settings.job_dir == tmp_path / "4242"
    with pytest.raises(ValueError, match="HPCSCOPE_CAPTURE_SCHEDULE"):
        CaptureSettings.from_env({"HPCSCOPE_CAPTURE": "1", "HPCSCOPE_CAPTURE_SCHEDULE": "3,1"})
    with pytest.raises(ConfigError, match="HPCSCOPE_CAPTURE_EVERY_SECONDS"):
        CaptureSettings.from_env({"HPCSCOPE_CAPTURE": "1", "HPCSCOPE_CAPTURE_EVERY_SECONDS": "x"})
    with pytest.raises(ConfigError, match="HPCSCOPE_CAPTURE_FIRST_STEP"):
        CaptureSettings.from_env({"HPCSCOPE_CAPTURE": "1", "HPCSCOPE_CAPTURE_FIRST_STEP": "2.5"})


def test_a_bad_setting_leaves_capture_off_without_raising(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HPCSCOPE_CAPTURE", "1")
    monkeypatch.setenv("HPCSCOPE_CAPTURE_SCHEDULE", "0,0,0")
    assert install_from_env() is None
    assert "active must be at least 1" in capsys.readouterr().err


@given(st.integers(0, 50), st.integers(0, 50), st.integers(1, 50))
def test_schedule_round_trips(wait: int, warmup: int, active: int) -> None:
    assert parse_schedule(f"{wait}, {warmup},{active}") == (wait, warmup, active)


@given(
    st.integers(0, 1 << 20),
    st.one_of(st.none(), st.integers(0, 7)),
    st.floats(1e9, 2e9, allow_nan=False),
)
def test_meta_round_trips(rank: int, gpu: int | None, ts: float) -> None:
    meta = CaptureMeta("7", "n1", gpu, rank, rank + 1, gpu, 3, 10, 13, ts, ts + 1, "t", (1, 1, 4))
    assert CaptureMeta.from_json(meta.to_json()) == meta
    with pytest.raises(CaptureMetaError, match="missing field") as raised:
        CaptureMeta.from_json(json.dumps({"format": "hpcscope-capture/1"}), source="m.json")
    assert (raised.value.source, raised.value.field) == ("m.json", "schedule")


def test_windows_open_at_the_first_step_then_once_per_clock_slot(tmp_path: Path) -> None:
    now = [1000.0]
    made: list[FakeProfiler] = []

    def profiler(schedule: Any, ready: Any) -> FakeProfiler:
        made.append(FakeProfiler(schedule, ready))
        return made[-1]

    settings = CaptureSettings(tmp_path, "9", (1, 1, 2), every_seconds=60.0, first_step=3)
    capture = Capture(settings, clock=lambda: now[0], profiler=profiler)
    optimizer, other = object(), object()
    for _ in range(3):
        capture.on_step(optimizer)
        capture.on_step(other)  # a second optimizer's steps are not counted
    assert capture.steps == 3 and len(made) == 1 and made[0].step_num == 3
    for _ in range(4):  # wait, warmup, 2 active: the trace is written at the end
        capture.on_step(optimizer)
    assert capture.windows_written == 1 and made[0].stopped
    meta = CaptureMeta.from_json(
        (tmp_path / "9" / "rank-00000.window-00000000.meta.json").read_text()
    )
    assert (meta.first_step, meta.last_step, meta.window) == (5, 6, 0)
    for _ in range(10):  # same clock slot: no new window
        capture.on_step(optimizer)
    assert len(made) == 1
    now[0] += 60.0
    capture.on_step(optimizer)
    assert len(made) == 2 and made[1].step_num == capture.steps


def test_an_error_switches_the_capture_off(tmp_path: Path) -> None:
    def broken(schedule: Any, ready: Any) -> Any:
        raise RuntimeError("no profiler here")

    capture = Capture(CaptureSettings(tmp_path, "1", first_step=0), profiler=broken)
    capture.on_step(object())
    capture.on_step(object())
    assert capture.disabled and capture.windows_written == 0


TRAIN = """
import torch
net = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(12):
    loss = net(torch.randn(16, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.torch
def test_the_environment_alone_captures_a_real_torch_run(tmp_path: Path) -> None:
    """No line of the script mentions hpcscope; the job's own sitecustomize still runs."""
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        f"open({str(tmp_path / 'own-ran')!r}, 'w').write('yes')\n"
    )
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    spool = tmp_path / "spool"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SITE), str(own), str(REPO_ROOT / "src")]),
        "HPCSCOPE_CAPTURE": "1",
        "HPCSCOPE_CAPTURE_SPOOL": str(spool),
        "HPCSCOPE_CAPTURE_FIRST_STEP": "2",
        "HPCSCOPE_CAPTURE_SCHEDULE": "1,1,3",
        "SLURM_JOB_ID": "77",
        "SLURMD_NODENAME": "node-a",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "own-ran").read_text() == "yes"
    metas = [p for p in (spool / "77").iterdir() if META_PATTERN.match(p.name)]
    assert len(metas) == 1
    meta = CaptureMeta.from_json(metas[0].read_text())
    assert (meta.node, meta.rank, meta.world_size, meta.job_id) == ("node-a", 0, 1, "77")
    assert (meta.first_step, meta.last_step) == (4, 6)
    trace = read_kineto(spool / "77" / meta.trace)
    steps = sorted(
        {n for n in trace.events.names if n.startswith("ProfilerStep#")},
        key=lambda n: int(n.split("#")[1]),
    )
    assert steps == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert not [p for p in (spool / "77").iterdir() if p.name.endswith(".tmp")]
