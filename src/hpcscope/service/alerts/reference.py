"""The rules reference (``docs/rules.md``), generated from the rule registry and the rule files.

``python -m hpcscope.service.alerts.reference`` rewrites ``docs/rules.md``; ``--check`` says
whether the committed file differs from what the code declares
(``tests/service/alerts/test_rule_registry.py`` runs the same comparison). One row per rule of
:func:`hpcscope.analysis.registry.registry`: id, kind, vector, severity and title (from the
bundled rule file, or from the declaration for rules set in code), the evaluator, and the
thresholds and lists the evaluator reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpcscope.analysis.registry import Rule, RuleKind, RuleRegistry, registry
from hpcscope.model.alerts import VECTOR_NAMES, RuleSpec
from hpcscope.service.alerts.rules import bundled_rules_dir, load_site_rules
from hpcscope.service.settings import REPO_ROOT

#: Where the reference is committed, relative to the repository root.
REFERENCE = Path("docs/rules.md")

#: The command that regenerates it (named in the drift test's message).
REGENERATE = "python -m hpcscope.service.alerts.reference"

_HEAD = """\
# Rules reference

Every detection and health rule hpcscope evaluates, one row each. Generated from the rule
registry (each evaluator module's `RULES`, collected by `hpcscope.analysis.registry`) and the
bundled rule files (`deploy/rules/*.yaml`: severity and title; a site's `rules_dir` may change
them). Do not edit by hand; run:

    {regenerate}

How each rule decides, its limits and its figures: `security.md`, `integrity.md`, `slo.md`
and `scraping.md`; how to add one: `development.md`, "A new rule".

Kinds: **event** (Falco alerts, Tetragon events), **posture** (a node's daily check),
**correlation** (access records and other rules' alerts), **telemetry** (InfiniBand, DCGM,
NVML, Lustre), **integrity** (the training process' records), **slo-burn** (error budgets),
**health** (hpcscope's own collection). Rules set in code have no rule-file entry.

| rule | kind | vector | severity | title | evaluator | thresholds; lists |
|---|---|---|---|---|---|---|
"""


def _settings(rule: Rule) -> str:
    parts = [", ".join(f"`{t}`" for t in rule.thresholds), ", ".join(f"`{x}`" for x in rule.lists)]
    if not rule.in_rule_file:
        return "set in code"
    return "; ".join(p or "-" for p in parts)


def _row(rule: Rule, spec: RuleSpec | None) -> str:
    vector = VECTOR_NAMES.get(rule.vector, "service level")
    severity = (
        spec.severity.name if spec is not None else rule.severity.name if rule.severity else "?"
    )
    title = (spec.title if spec is not None else rule.title or "").replace("|", "\\|")
    cells = [
        f"`{rule.rule_id}`",
        rule.kind.value,
        f"{int(rule.vector)} {vector}",
        severity,
        title,
        f"`{rule.evaluator_name.removeprefix('hpcscope.')}`",
        _settings(rule),
    ]
    return "| " + " | ".join(cells) + " |"


def render(declared: RuleRegistry | None = None) -> str:
    """The reference's text (module docstring)."""
    rules = registry() if declared is None else declared
    specs = load_site_rules(bundled_rules_dir(), registered=rules)
    rows = [
        _row(rule, specs.get(rule.rule_id)) for kind in RuleKind for rule in rules.of_kind(kind)
    ]
    return _HEAD.format(regenerate=REGENERATE) + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the reference, or with ``--check`` report drift (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    path = REPO_ROOT / REFERENCE
    text = render()
    if args.check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{REFERENCE} differs from the registry; run: {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
