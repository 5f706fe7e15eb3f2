"""``python -m hpcscope.service.sources [--check]``: rewrite (or compare) ``docs/sources.md``."""

from __future__ import annotations

import argparse
import sys

from hpcscope.service.sources._reference import COMMAND, DOC, reference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only; 1 when stale")
    args = parser.parse_args(argv)
    text = reference()
    if args.check:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
