"""Training-side security events (W-4, DP-5), written from inside the training process.

::

    import hpcscope.integrity.training as events
    recorder = events.start()               # or maybe_start(): only when HPCSCOPE_INTEGRITY=1
    ...
    loss = step(batch)
    recorder.shard_loss(batch.shard, loss)  # DP-5: per-shard loss, one record per window

:func:`start` wraps ``torch.load`` so that every load is recorded with its real path and the
``weights_only`` mode it ran with (W-4: a pickle loaded with ``weights_only=False`` runs code;
PyTorch's SECURITY.md: "models are programs"). The wrapper calls the original with the same
arguments and returns what it returns. :meth:`TrainingRecorder.shard_loss` accumulates each
shard's loss and appends one ``shard_loss`` record every ``window_steps`` calls. Lines go to
``<spool>/<job>/training-<rank>.jsonl`` (format: :mod:`hpcscope.model.training_events`).

Imports only the model; torch is imported by :func:`start`. A failure to write a record is
counted in :attr:`TrainingRecorder.write_errors`, never raised into the training loop.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpcscope.integrity.hook import DEFAULT_SPOOL, ENV_ENABLE, ENV_SPOOL, _claimed_gpu
from hpcscope.model.training_events import FORMAT

DEFAULT_WINDOW_STEPS = 200


def _torch_default_weights_only(torch: Any, kwargs: Mapping[str, object]) -> bool:
    """What ``torch.load`` decides when the caller does not pass ``weights_only``."""
    if os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0") not in ("0", ""):
        return True
    if os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") not in ("0", ""):
        return False
    if kwargs.get("pickle_module") is not None:
        return False
    release = str(torch.__version__).split("+")[0].split(".")
    try:
        major, minor = int(release[0]), int(release[1])
    except (IndexError, ValueError):
        return False  # a version we cannot read: never claim the safe mode
    return (major, minor) >= (2, 6)


def _owner(path: str) -> str | None:
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_name
    except (OSError, KeyError):
        return None


class TrainingRecorder:
    """Appends this rank's training events to ``<spool_dir>/training-<rank>.jsonl``."""

    def __init__(
        self,
        spool_dir: Path,
        *,
        job_id: str,
        rank: int,
        gpu: int | None = None,
        node: str | None = None,
        window_steps: int = DEFAULT_WINDOW_STEPS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window_steps < 1:
            raise ValueError(f"window_steps={window_steps}: want at least 1")
        self.job_id, self.rank, self.gpu = job_id, rank, gpu
        self.node = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        self.window_steps = window_steps
        self._clock = clock
        spool_dir.mkdir(parents=True, exist_ok=True)
        self.path = spool_dir / f"training-{rank}.jsonl"
        self._lock = threading.Lock()
        self._losses: dict[str, list[float]] = {}
        self._calls = 0
        self.window = 0
        self.write_errors = 0
        self._undo: Callable[[], None] | None = None

    def _write(self, kind: str, fields: Mapping[str, object]) -> None:
        record = {"format": FORMAT, "kind": kind, "job_id": self.job_id, "node": self.node,
                  "gpu": self.gpu, "rank": self.rank, "pid": os.getpid(), "ts": self._clock(),
                  **fields}  # fmt: skip
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        except OSError:
            self.write_errors += 1

    def load(self, path: object, weights_only: bool) -> None:
        """Record one ``torch.load`` of ``path`` (a path or a file object with ``name``)."""
        name = path if isinstance(path, (str, os.PathLike)) else getattr(path, "name", None)
        if not isinstance(name, (str, os.PathLike)):
            return  # an in-memory buffer: no file to attribute
        real = os.path.realpath(os.fspath(name))
        self._write("load", {"path": real, "weights_only": bool(weights_only),
                             "owner": _owner(real)})  # fmt: skip

    def shard_loss(self, shard: str, loss: float) -> None:
        """Add one batch's loss for ``shard``; every ``window_steps`` calls, one record."""
        with self._lock:
            self._losses.setdefault(str(shard), []).append(float(loss))
            self._calls += 1
            if self._calls < self.window_steps:
                return
            losses, self._losses, self._calls = self._losses, {}, 0
            window, self.window = self.window, self.window + 1
        shards = {s: [sum(v) / len(v), len(v)] for s, v in sorted(losses.items())}
        self._write("shard_loss", {"window": window, "shards": shards})

    def watch_torch_load(self) -> None:
        """Wrap ``torch.load`` (and ``torch.serialization.load``) to record each call."""
        import torch
        import torch.serialization

        original = torch.load
        recorder = self

        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            weights_only = kwargs.get("weights_only")
            if weights_only is None:
                weights_only = _torch_default_weights_only(torch, kwargs)
            result = original(f, *args, **kwargs)
            recorder.load(f, bool(weights_only))
            return result

        load.__wrapped__ = original  # type: ignore[attr-defined]
        torch.load = load
        torch.serialization.load = load

        def undo() -> None:
            torch.load = original
            torch.serialization.load = original

        self._undo = undo

    def stop(self) -> None:
        """Put ``torch.load`` back."""
        if self._undo is not None:
            self._undo()
            self._undo = None


def start(
    *, spool_root: str | Path | None = None, job_id: str | None = None, rank: int | None = None,
    window_steps: int = DEFAULT_WINDOW_STEPS,
) -> TrainingRecorder:  # fmt: skip
    """A recorder for this process (defaults from the golden path's environment, as the
    gradient hook: ``HPCSCOPE_INTEGRITY_SPOOL``, ``SLURM_JOB_ID``, ``RANK``, ``LOCAL_RANK``)
    with ``torch.load`` watched."""
    job = job_id or os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or "local"
    root = Path(spool_root or os.environ.get(ENV_SPOOL) or DEFAULT_SPOOL)
    if rank is None:
        rank = int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)
    local = os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID")
    recorder = TrainingRecorder(root / job, job_id=job, rank=rank, window_steps=window_steps,
                                gpu=_claimed_gpu(int(local) if local else None))  # fmt: skip
    recorder.watch_torch_load()
    return recorder


def maybe_start(**kwargs: Any) -> TrainingRecorder | None:
    """:func:`start` when ``HPCSCOPE_INTEGRITY=1``, else nothing."""
    if os.environ.get(ENV_ENABLE, "").strip() not in ("1", "true", "yes"):
        return None
    return start(**kwargs)
