"""Opt-in gradient-integrity telemetry for PyTorch DDP (threat vector 4, rules GI-1 to GI-4).

One line in a training script::

    import hpcscope.integrity
    hpcscope.integrity.register(ddp_model)          # always
    hpcscope.integrity.maybe_register(ddp_model)    # only when HPCSCOPE_INTEGRITY=1

registers a DDP communication hook that wraps PyTorch's default allreduce hook and, per rank
and bucket, writes the gradient norm, the NaN/Inf count and a count-sketch of the gradient sent
and of the averaged gradient received to the job's spool, which the hpcscope collector reads.
See ``docs/integrity.md``. Importing this package needs neither the web service nor the store;
torch is imported only by :func:`register`.
"""

from __future__ import annotations

from hpcscope.integrity.hook import (
    ENV_CHECKSUM_EVERY,
    ENV_ENABLE,
    ENV_SEED,
    ENV_SKETCH_DIM,
    ENV_SPOOL,
    IntegrityHook,
    Observation,
    comm_hook,
    maybe_register,
    register,
)
from hpcscope.integrity.sketch import CountSketch, job_seed

__all__ = [
    "ENV_CHECKSUM_EVERY",
    "ENV_ENABLE",
    "ENV_SEED",
    "ENV_SKETCH_DIM",
    "ENV_SPOOL",
    "CountSketch",
    "IntegrityHook",
    "Observation",
    "comm_hook",
    "job_seed",
    "maybe_register",
    "register",
]
