"""The notification rules file: the shipped one loads; a bad one names its file, line and
field, and stops the server from starting."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from hpcscope.analysis.notify.rules import RuleKind
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.server import run_server
from hpcscope.service.core import Service
from hpcscope.service.notify.config import NotifyRuleError, load_notify_config
from hpcscope.service.notify.engine import Notifier


def test_the_shipped_rules_load() -> None:
    config = load_notify_config()
    assert [(r.rule_id, r.kind, r.cancel) for r in config.rules] == [
        ("low-efficiency", RuleKind.LOW_REAL_EFFICIENCY, False),
        ("idle-allocation", RuleKind.ZERO_ACTIVITY, True),
        ("over-requested-gpus", RuleKind.IDLE_GPUS, False),
        ("xid-failure", RuleKind.FAILED_WITH_XID, False),
    ]
    assert config.notes.low_efficiency_sm_ratio == 0.25
    assert config.rules[1].line == 18  # where the rule starts, for messages


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("rules:\n  - id: a\n    kind: nope\n    title: t\n", 3, "rules.0.kind", "Input should be"),
        (
            "rules:\n  - id: a\n    kind: idle_gpus\n    title: t\n    cancel: true\n",
            2,
            "rules.0",
            "cancel: true is only for rules of kind zero_activity",
        ),
        ("notes:\n  idle_ratio: 2\n", 2, "notes.idle_ratio", "less than or equal to 1"),
        (
            "rules:\n  - id: a\n    kind: idle_gpus\n    title: t\n    colour: red\n",
            5,
            "rules.0.colour",
            "Extra inputs",
        ),
        (
            "rules:\n  - {id: a, kind: idle_gpus, title: t}\n  - {id: a, kind: idle_gpus, "
            "title: u}\n",
            3,
            "id",
            "rule id 'a' repeated",
        ),
        ("rules: [\n", 2, None, "not YAML"),
    ],
)
def test_a_bad_file_names_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str | None, message: str
) -> None:
    path = tmp_path / "notifications.yaml"
    path.write_text(text)
    with pytest.raises(NotifyRuleError) as caught:
        load_notify_config(path)
    error = caught.value
    assert error.source == str(path) and error.line == line and error.field == field
    assert message in error.message


def test_a_bad_file_stops_the_server(service: Service, tmp_path: Path) -> None:
    path = tmp_path / "notifications.yaml"
    path.write_text("rules:\n  - id: a\n    kind: nope\n    title: t\n")
    service.settings = service.settings.model_copy(update={"notify_rules_path": path})
    with pytest.raises(NotifyRuleError):
        run_server(service, duration_seconds=0.1)


def test_the_hook_never_raises(service: Service) -> None:
    class Broken(Notifier):
        def run_once(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("store gone")

    assert Broken(service, load_notify_config()).after_cycle() is None


def test_the_hook_runs_once_per_interval(service: Service) -> None:
    class Counting(Notifier):
        runs = 0

        def run_once(self):  # type: ignore[no-untyped-def]
            Counting.runs += 1
            return super().run_once()

    clock = [utcnow()]
    hook = Counting(service, load_notify_config(), now=lambda: clock[0])
    assert hook.after_cycle() is not None
    clock[0] += timedelta(seconds=30)
    assert hook.after_cycle() is None  # the collector cycled again: too soon
    clock[0] += timedelta(seconds=30)
    assert hook.after_cycle() is not None
    assert Counting.runs == 2
