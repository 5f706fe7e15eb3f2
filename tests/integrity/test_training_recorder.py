"""The training recorder inside a real torch process: ``torch.load`` is watched (path, the
``weights_only`` it ran with), per-shard losses become one record per window, and the
server's parser reads every line the recorder wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from hpcscope.ingest.integrity.training_events import parse_event_lines
from hpcscope.integrity.training import TrainingRecorder, start
from hpcscope.model.training_events import TrainingEvent


def _events(path: Path) -> list[TrainingEvent]:
    lines = [(i + 1, text) for i, text in enumerate(path.read_bytes().split(b"\n")[:-1])]
    parsed = parse_event_lines(lines, source=str(path))
    assert parsed.errors == []
    return list(parsed.events)


def test_loads_are_recorded_with_the_mode_they_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", raising=False)
    weights = tmp_path / "ckpt" / "model.pt"
    weights.parent.mkdir()
    torch.save({"w": torch.ones(3)}, weights)
    link = tmp_path / "latest.pt"
    link.symlink_to(weights)
    original = torch.load
    recorder = start(spool_root=tmp_path / "spool", job_id="4242", rank=1)
    try:
        assert torch.load(weights, weights_only=False)["w"].sum().item() == 3.0
        torch.load(link)  # torch >= 2.6: weights_only=True by default
        with weights.open("rb") as handle:
            torch.load(handle, weights_only=False)
    finally:
        recorder.stop()
    assert torch.load is original
    events = _events(tmp_path / "spool" / "4242" / "training-1.jsonl")
    assert [(e.kind, e.path, e.weights_only) for e in events] == [
        ("load", str(weights), False),
        ("load", str(weights), True),  # the symlink's real path
        ("load", str(weights), False),
    ]
    assert {e.job_id for e in events} == {"4242"}
    assert events[0].owner
    assert events[0].pid == os.getpid()


def test_forcing_unsafe_loads_is_recorded_as_unsafe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = tmp_path / "m.pt"
    torch.save([1, 2], weights)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    recorder = start(spool_root=tmp_path / "spool", job_id="7", rank=0)
    try:
        with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
            torch.load(weights)
    finally:
        recorder.stop()
    [event] = _events(tmp_path / "spool" / "7" / "training-0.jsonl")
    assert event.weights_only is False


def test_shard_losses_make_one_record_per_window(tmp_path: Path) -> None:
    ticks = iter(range(1_796_126_400, 1_796_126_500))
    recorder = TrainingRecorder(tmp_path, job_id="9", rank=0, gpu=2, node="gpu01",
                                window_steps=4, clock=lambda: float(next(ticks)))  # fmt: skip
    for step, (shard, loss) in enumerate([("a", 2.0), ("b", 3.0), ("a", 4.0), ("c", 1.0),
                                          ("a", 1.0), ("a", 1.0), ("b", 1.0)]):  # fmt: skip
        recorder.shard_loss(shard, loss)
        assert recorder.window == (1 if step >= 3 else 0)
    [event] = _events(tmp_path / "training-0.jsonl")  # the second window is not full yet
    assert event.window == 0 and event.gpu == 2 and event.node == "gpu01"
    assert dict(event.shards) == {"a": (3.0, 2), "b": (3.0, 1), "c": (1.0, 1)}


def test_a_window_of_zero_steps_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="window_steps"):
        TrainingRecorder(tmp_path, job_id="9", rank=0, window_steps=0)


def test_an_unwritable_spool_never_reaches_the_training_loop(tmp_path: Path) -> None:
    recorder = TrainingRecorder(tmp_path / "spool", job_id="9", rank=0, window_steps=1)
    recorder.path.mkdir()  # the file cannot be opened for appending
    recorder.shard_loss("a", 1.0)
    assert recorder.write_errors == 1
