#!/usr/bin/env python3
"""Generate hpcscope's Grafana dashboards (classic JSON) into deploy/grafana/.

The dashboards' source is the ``scripts.grafana`` package (one module per dashboard); this
script writes what it renders and removes JSON files no dashboard owns any more.
Run: ``python scripts/grafana_dashboards.py`` (docs/grafana.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "grafana"


def main() -> int:
    if str(ROOT) not in sys.path:  # run as a file: make the checkout's ``scripts`` importable
        sys.path.insert(0, str(ROOT))
    from scripts.grafana import DASHBOARDS, render

    OUT.mkdir(parents=True, exist_ok=True)
    for stale in OUT.glob("*.json"):
        if stale.name not in DASHBOARDS:
            stale.unlink()
            print(f"removed {stale}")
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
