"""Training-side security events: what the in-process recorder writes for W-4 and DP-5.

:mod:`hpcscope.integrity.training` runs inside the training process (like the gradient hook)
and appends one JSON line per event to ``<spool>/<job>/training-<rank>.jsonl``, in the
integrity spool the collector already reads (``integrity_spool_dir``)::

    {"format": "hpcscope-training/1", "kind": "load", "job_id": "4242", "node": "n001",
     "gpu": 3, "rank": 0, "pid": 5120, "ts": 1767225600.1, "path": "/lustre/ckpt/a.pt",
     "weights_only": false, "owner": "bob"}
    {"format": "hpcscope-training/1", "kind": "shard_loss", "job_id": "4242", "node": "n001",
     "gpu": 3, "rank": 0, "pid": 5120, "ts": 1767225660.0, "window": 7,
     "shards": {"shard-0001": [2.31, 64], "shard-0002": [2.29, 64]}}

``load``: one ``torch.load`` call, the real path of the file and the ``weights_only`` it ran
with (the keyword, or torch's default: ``True`` from torch 2.6 unless
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` or a ``pickle_module`` says otherwise); ``owner`` the file
owner's user name (null when unknown). ``shard_loss``: the mean training loss of each data
shard over one window of steps, with its batch count. Everything is **self-reported by the
training process and untrusted**: the job is re-derived from the platform's allocations at
ingest, and the producer of a loaded path comes from the Lustre changelog when it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FORMAT = "hpcscope-training/1"
KINDS = ("load", "shard_loss")


@dataclass(frozen=True, slots=True)
class TrainingEvent:
    """One line of a ``training-<rank>.jsonl`` file, as parsed.

    Attributes:
        kind: ``load`` or ``shard_loss``.
        job_id / node / gpu / rank / pid: the process' claims.
        ts: seconds since the epoch.
        path / weights_only / owner: a load's file, mode and file owner.
        window / shards: a shard-loss window's index and shard -> (mean loss, batches).
        source / line: where the line was read.
    """

    kind: str
    job_id: str
    node: str
    gpu: int | None
    rank: int
    pid: int | None
    ts: float
    path: str | None = None
    weights_only: bool | None = None
    owner: str | None = None
    window: int | None = None
    shards: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    source: str = ""
    line: int = 0
