"""The dependency lock: every requirement of pyproject.toml (runtime and dev) is pinned in
``requirements/dev.lock`` at a version that satisfies it, every pin carries hashes, and the
installed environment is the locked one (what ``make venv`` installs with
``--require-hashes``)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "dev.lock"
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)")


def _pins(text: str) -> dict[str, tuple[Version, int]]:
    """name -> (version, number of hashes) of a pip-compile lock."""
    pins: dict[str, tuple[Version, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if match := PIN.match(line):
            current = canonicalize_name(match[1])
            pins[current] = (Version(match[2]), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
        elif line and not line.startswith((" ", "#")):
            current = None
    return pins


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    ]


def test_the_lock_pins_every_requirement_at_a_version_it_allows() -> None:
    pins = _pins(LOCK.read_text())
    problems = []
    for requirement in _requirements():
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{requirement} is not in {LOCK.name} (run `make lock`)")
        elif not requirement.specifier.contains(pinned[0], prereleases=True):
            problems.append(f"{requirement}: the lock pins {pinned[0]} (run `make lock`)")
    assert not problems, "\n".join(problems)


def test_every_pin_has_hashes_and_no_index_is_baked_in() -> None:
    text = LOCK.read_text()
    pins = _pins(text)
    assert len(pins) > 30
    assert [name for name, (_, hashes) in pins.items() if hashes == 0] == []
    # a site's mirror is the machine's pip configuration, never the lock's
    assert not re.search(r"^--(extra-)?index-url|^--find-links", text, re.MULTILINE)


def test_the_installed_environment_is_the_locked_one() -> None:
    pins = _pins(LOCK.read_text())
    drift = []
    for name, (version, _) in pins.items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            drift.append(f"{name}=={version} is locked but not installed")
            continue
        if installed != version:
            drift.append(f"{name}: installed {installed}, locked {version}")
    assert not drift, "\n".join(drift) + "\n(`make venv` installs the lock)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a==1.0 \\\n    --hash=sha256:ab \\\n    --hash=sha256:cd\n    # via b\n", {"a": 2}),
        ("a==1.0\nb==2 \\\n    --hash=sha256:ef\n", {"a": 0, "b": 1}),
    ],
)
def test_the_lock_reader(text: str, expected: dict[str, int]) -> None:
    assert {name: hashes for name, (_, hashes) in _pins(text).items()} == expected
