"""Lightweight profiler capture switched on by the site: no change to the training script.

The Slurm TaskProlog (``deploy/slurm/prolog``, ``capture_dir=`` in the site config) exports
``HPCSCOPE_CAPTURE=1`` and the spool, and puts ``deploy/slurm/capture/sitecustomize.py`` on
``PYTHONPATH``; that calls :func:`install_from_env`, which registers a global optimizer step
post-hook once torch is imported. Every ``every_seconds`` the hook profiles
``wait + warmup + active`` steps with ``torch.profiler`` and writes the rank's Kineto trace and
a meta file into ``<spool>/<job>/`` (format: :mod:`hpcscope.model.capture`), which the
collector analyses (``docs/capture.md``). A script may also call it itself::

    import hpcscope.capture
    hpcscope.capture.install_from_env()

Importing this package needs neither torch, nor the web service, nor the store.
"""

from __future__ import annotations

from hpcscope.capture.activate import install, install_from_env, register_with_torch, when_imported
from hpcscope.capture.window import Capture, CaptureSettings

__all__ = [
    "Capture",
    "CaptureSettings",
    "install",
    "install_from_env",
    "register_with_torch",
    "when_imported",
]
