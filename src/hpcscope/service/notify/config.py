"""The notification rules file (``deploy/notify/notifications.yaml`` or the site's own).

Validated at start: a bad file fails ``hpcscope serve`` with a :class:`NotifyRuleError` naming
the file, the line and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hpcscope.analysis.notify.notes import NoteThresholds
from hpcscope.analysis.notify.rules import NotifyRule, RuleKind
from hpcscope.model import bounded_yaml
from hpcscope.model.errors import SourceError
from hpcscope.service.settings import REPO_ROOT


class NotifyRuleError(SourceError):
    """A notification rules file that cannot be used (file, line, field)."""


class _Notes(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_runtime_seconds: float = Field(600.0, ge=0)
    idle_ratio: float = Field(0.05, ge=0, le=1)
    low_efficiency_sm_ratio: float = Field(0.25, ge=0, le=1)
    starved_util_ratio: float = Field(0.6, ge=0, le=1)
    starved_sm_ratio: float = Field(0.3, ge=0, le=1)
    memory_low_ratio: float = Field(0.2, ge=0, le=1)
    memory_high_ratio: float = Field(0.95, ge=0, le=1)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: RuleKind
    title: str = Field(min_length=1)
    below_ratio: float = Field(0.0, ge=0, le=1)
    for_minutes: int = Field(30, ge=1, le=7 * 24 * 60)
    min_coverage_ratio: float = Field(0.8, gt=0, le=1)
    cancel: bool = False
    enabled: bool = True

    @model_validator(mode="after")
    def _cancel_only_when_idle(self) -> _Rule:
        if self.cancel and self.kind is not RuleKind.ZERO_ACTIVITY:
            raise ValueError("cancel: true is only for rules of kind zero_activity")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    notes: _Notes = Field(default_factory=_Notes)
    rules: list[_Rule] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """The notification rules and the note thresholds."""

    rules: tuple[NotifyRule, ...]
    notes: NoteThresholds
    source: str = "<builtin>"

    def rule(self, rule_id: str) -> NotifyRule | None:
        return next((r for r in self.rules if r.rule_id == rule_id), None)


def bundled_notify_rules() -> Path:
    """The shipped rules file (``deploy/notify/notifications.yaml``, or the wheel's copy)."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "notify" / "notifications.yaml",
        REPO_ROOT / "deploy" / "notify" / "notifications.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("no bundled notifications.yaml")


def _line(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            node = node.value[key] if key < len(node.value) else None
        else:
            break
    return None if node is None else node.start_mark.line + 1


def load_notify_config(path: Path | None = None) -> NotifyConfig:
    """Read and validate a rules file (default: the bundled one).

    Raises:
        NotifyRuleError: unreadable, not YAML, an unknown field, a bad value or a repeated id.
    """
    path = path or bundled_notify_rules()
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        tree, data = bounded_yaml.compose_and_load(text, source=source)
        data = data or {}
    except OSError as exc:
        raise NotifyRuleError(f"cannot read: {exc.strerror}", source=source) from None
    except UnicodeDecodeError as exc:
        raise NotifyRuleError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise NotifyRuleError(
            f"not YAML: {getattr(exc, 'problem', exc)}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    try:
        parsed = _File.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        raise NotifyRuleError(
            first["msg"],
            source=source,
            line=_line(tree, loc),
            field=".".join(str(p) for p in loc),
        ) from None
    seen: set[str] = set()
    rules = []
    for index, rule in enumerate(parsed.rules):
        line = _line(tree, ("rules", index))
        if rule.id in seen:
            raise NotifyRuleError(
                f"rule id {rule.id!r} repeated", source=source, line=line, field="id"
            )
        seen.add(rule.id)
        rules.append(
            NotifyRule(
                rule_id=rule.id,
                kind=rule.kind,
                title=rule.title,
                below_ratio=rule.below_ratio,
                for_minutes=rule.for_minutes,
                min_coverage_ratio=rule.min_coverage_ratio,
                cancel=rule.cancel,
                enabled=rule.enabled,
                source=source,
                line=line,
            )
        )
    return NotifyConfig(
        rules=tuple(rules), notes=NoteThresholds(**parsed.notes.model_dump()), source=source
    )
