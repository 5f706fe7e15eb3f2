"""Training-side events through the integrity spool: the twin's W-4/DP-5 scenarios replayed
(store, changelog parser, spool files, IntegritySpool) raise exactly their alerts, attributed
to the platform's job; a second pass over the same files writes nothing new."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Severity
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.store.alerts import alerts
from hpcscope.twin import attacks_training
from hpcscope.twin.telemetry_traces import SECOND_NS
from tests.support.integrity_replay import replay_training

T0 = 1_796_126_400 * SECOND_NS
RULES = load_site_rules(None)


@pytest.mark.parametrize("make", attacks_training.SCENARIOS)
def test_scenarios_through_the_spool(make: object, tmp_path: Path) -> None:
    s = make(T0)  # type: ignore[operator]
    store, cycle = replay_training(s, tmp_path, RULES)
    try:
        assert cycle.errors == []
        found = alerts(store, JobScope(all_jobs=True))
        assert dict(Counter(a.rule_id for a in found)) == s.expected
        for alert in found:
            assert (alert.node, alert.job_id, alert.gpu) == (s.node, s.job_id, s.gpu)
            assert (alert.user, alert.account) == ("alice", "vision")
        for rule, severity in s.severities.items():
            assert max(a.severity for a in found if a.rule_id == rule) is Severity[severity]
        again = IntegritySpool(store, tmp_path / "integrity", RULES)
        again.training._written = {a.key: a.last_seen for a in found}
        assert again.collect_once().alerts == 0
    finally:
        store.close()


def test_a_claimed_job_is_not_believed(tmp_path: Path) -> None:
    s = attacks_training.foreign_pickle_load(T0)
    job, rank, text = s.training_events[0]
    s.training_events = [(job, rank, text.replace('"job_id":"4410001"', '"job_id":"4410002"'))]
    store, _ = replay_training(s, tmp_path, RULES)
    try:
        [alert] = alerts(store, JobScope(all_jobs=True))
        assert (alert.job_id, alert.account) == ("4410001", "vision")  # the allocation's job
    finally:
        store.close()
