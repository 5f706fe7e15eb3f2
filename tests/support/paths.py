"""Where test inputs and outputs live."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: The shared pool of real-format samples (see its README for provenance). Tests copy what they
#: need into tests/fixtures/ with provenance; this path is only for checks over the whole pool.
SHARED_SAMPLES = Path(
    os.environ.get("HPCSCOPE_SHARED_SAMPLES", REPO_ROOT.parent / "shared" / "samples")
)

FIXTURES = REPO_ROOT / "tests" / "fixtures"

#: Screenshots and other artefacts a test run leaves for people to look at.
ARTIFACTS = REPO_ROOT / "test-artifacts"
