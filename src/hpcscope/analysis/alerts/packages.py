"""SC-5: a Python distribution installed into a ``site-packages`` during a job.

Falco's package-manager rules key on ``proc.name in (pip, ...)`` and miss ``python -m pip``,
``uv`` or a setup script: what every installer leaves is the same, a
``<name>-<version>.dist-info/`` directory (``METADATA``, ``RECORD``...) or a ``.pth`` file
directly in a ``site-packages`` (or Debian ``dist-packages``) directory, and ``.pth`` files are
run by every interpreter start (the ``litellm`` 1.82.8 / ``ultralytics`` style persistence).
A write of such a path by a job process raises SC-5: MEDIUM, HIGH when the distribution
(name, version) is not in the site's lockfile list or is on its known-bad list. A ``.pth``
names no version: HIGH unless its distribution's name is locked.

Names compare normalised (PEP 503: lower case, runs of ``-_.`` as ``-``); versions as
written. Limit: a file event carries no wheel hash, so the ``sha256`` of the reference's HIGH
condition is not checked here (a lockfile entry is ``name==version``). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_SITE_DIRS = ("site-packages", "dist-packages")
_DIST_INFO = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._]*?)-(?P<version>[^-/]+)\.dist-info$")
_LOCK_ENTRY = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s=]+)\s*$")
_RUNS = re.compile(r"[-_.]+")


@dataclass(frozen=True, slots=True)
class InstalledFile:
    """A path an installer writes: a distribution's metadata or a ``.pth`` file.

    Attributes:
        site_dir: the ``site-packages`` directory written.
        name: the distribution (normalised) or, for a ``.pth``, its file stem (normalised).
        version: the distribution's version; None for a ``.pth``.
        kind: ``dist-info`` or ``pth``.
        entry: the directory or file written directly in ``site_dir``, as named.
    """

    site_dir: str
    name: str
    version: str | None
    kind: str
    entry: str

    @property
    def subject(self) -> str:
        """What one alert is about: the distribution (all its files), or the ``.pth``."""
        if self.kind == "pth":
            return f"{self.site_dir}/{self.entry}"
        return f"{self.name} {self.version}"


def normalise(name: str) -> str:
    """PEP 503 normal form of a distribution name (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return _RUNS.sub("-", name).lower()


def installed_file(path: str) -> InstalledFile | None:
    """The distribution file ``path`` is, when it is one (else None).

    ``/v/lib/python3.11/site-packages/Requests-2.31.0.dist-info/RECORD`` is
    ``requests 2.31.0``; ``/v/lib/python3.11/site-packages/evil.pth`` a ``.pth``; a ``.pth``
    below a package (``site-packages/torch/x.pth``, weights) or a ``.pyc`` is not.
    """
    parts = path.split("/")
    for index in range(len(parts) - 1, 0, -1):
        if parts[index - 1] not in _SITE_DIRS:
            continue
        site_dir = "/".join(parts[:index])
        entry, rest = parts[index], parts[index + 1 :]
        if not rest and entry.endswith(".pth") and len(entry) > 4:
            return InstalledFile(site_dir, normalise(entry[:-4]), None, "pth", entry)
        match = _DIST_INFO.match(entry)
        if match is not None and rest and rest[0]:
            version = match.group("version")
            name = normalise(match.group("name"))
            return InstalledFile(site_dir, name, version, "dist-info", entry)
        return None
    return None


def lock_entry(text: str) -> tuple[str, str] | None:
    """``(normalised name, version)`` of a ``name==version`` entry; None when malformed."""
    match = _LOCK_ENTRY.match(text)
    return None if match is None else (normalise(match.group(1)), match.group(2))


def lock_set(entries: Iterable[str]) -> frozenset[tuple[str, str]]:
    """The well-formed entries of a list (the loader rejects the others at start)."""
    return frozenset(e for e in (lock_entry(t) for t in entries) if e is not None)


def why_high(
    found: InstalledFile,
    lockfile: frozenset[tuple[str, str]],
    known_bad: frozenset[tuple[str, str]],
) -> str | None:
    """Why ``found`` is HIGH (not locked, or known bad), or None when it stays MEDIUM."""
    if found.version is None:
        locked = any(name == found.name for name, _ in lockfile)
        return None if locked else f"no locked distribution is named {found.name}"
    key = (found.name, found.version)
    if key in known_bad:
        return f"{found.name}=={found.version} is on the known-bad list"
    if key not in lockfile:
        return f"{found.name}=={found.version} is not in the lockfile"
    return None
