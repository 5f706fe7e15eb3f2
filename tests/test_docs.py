"""Docs-drift tests: every setting, CLI command and exported metric family is documented."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.main import get_command

from hpcscope.cli.main import app
from hpcscope.service.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_setting_is_documented() -> None:
    text = (DOCS / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([a-z][a-z0-9_]*)` \|", text, flags=re.MULTILINE))
    assert documented == set(Settings.model_fields)


def _commands(group: typer.Typer) -> set[str]:
    command = get_command(group)
    names: set[str] = set()
    for name, sub in getattr(command, "commands", {}).items():
        names.add(name)
        for child in getattr(sub, "commands", {}):
            names.add(f"{name} {child}")
    return names


def test_every_cli_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    missing = {name for name in _commands(app) if f"`hpcscope {name}" not in text}
    assert not missing, f"undocumented commands: {sorted(missing)}"


def test_every_exported_metric_family_is_documented() -> None:
    source = (Path(__file__).resolve().parents[1] / "src/hpcscope/serve/metrics.py").read_text()
    families = set(re.findall(r'"(hpcscope_[a-z_]+)"', source))
    text = (DOCS / "metrics.md").read_text()
    missing = {family for family in families if f"`{family}`" not in text}
    assert not missing, f"undocumented metric families: {sorted(missing)}"
