"""Switching the capture on in a process without touching its script.

``install_from_env()`` is what the site's ``sitecustomize.py`` calls (``deploy/slurm/capture/``,
put on ``PYTHONPATH`` by the Slurm TaskProlog): when ``HPCSCOPE_CAPTURE=1`` it arranges for
:meth:`~hpcscope.capture.window.Capture.on_step` to become a global optimizer step post-hook as
soon as the process imports ``torch`` (a one-shot import hook on ``sys.meta_path``: processes
that never import torch pay nothing, and nothing imports torch early). Python processes of the
job that do not train (a shell's ``python -c``, a data pre-processor) never step an optimizer
and so write nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from hpcscope.capture.window import Capture, CaptureSettings

_INSTALLED: list[Capture] = []


class _AfterImport(importlib.abc.Loader):
    """Runs the real loader, then ``callback`` once the module is fully imported."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._callback()


class _WhenImported(importlib.abc.MetaPathFinder):
    """Finds ``name`` with the other finders and wraps its loader; removes itself after."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self._name = name
        self._callback = callback
        self._busy = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name or self._busy:
            return None
        self._busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _AfterImport(spec.loader, self._callback)
        return spec


def when_imported(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _WhenImported(name, callback))


def register_with_torch(capture: Capture) -> Any:
    """Make ``capture`` a global optimizer step post-hook; returns torch's handle."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    return register_optimizer_step_post_hook(capture.on_step)


def install(settings: CaptureSettings) -> Capture:
    """Capture with ``settings`` in this process once torch is imported (idempotent)."""
    if _INSTALLED:
        return _INSTALLED[0]
    capture = Capture(settings)
    _INSTALLED.append(capture)
    when_imported("torch", lambda: _register_quietly(capture))
    return capture


def _register_quietly(capture: Capture) -> None:
    try:
        register_with_torch(capture)
    except Exception as exc:  # an old torch without the global hook: capture stays off
        capture.disabled = True
        sys.stderr.write(f"hpcscope.capture: not installed: {exc!r}\n")


def install_from_env() -> Capture | None:
    """:func:`install` with the environment's settings, or None when capture is off.

    A malformed setting is reported on stderr and leaves capture off (never an exception in
    the researcher's process).
    """
    try:
        settings = CaptureSettings.from_env()
    except ValueError as exc:
        sys.stderr.write(f"hpcscope.capture: off: {exc}\n")
        return None
    return None if settings is None else install(settings)
