"""House rules on the shape of the source tree that no linter checks."""

from __future__ import annotations

from tests.support.paths import REPO_ROOT

MODULE_LINES_LIMIT = 500  # house style: modules under 500 lines


def test_every_module_under_src_has_fewer_than_500_lines() -> None:
    """A module past 500 lines is split along a seam (what it holds apart from what it does,
    the reading of a format apart from its parsing), its public names still importable."""
    modules = sorted((REPO_ROOT / "src").rglob("*.py"))
    assert len(modules) > 100, "src/ not found"
    too_long = {
        str(path.relative_to(REPO_ROOT)): lines
        for path in modules
        if (lines := len(path.read_text().splitlines())) >= MODULE_LINES_LIMIT
    }
    assert not too_long, f"modules of {MODULE_LINES_LIMIT} lines or more: {too_long}"
