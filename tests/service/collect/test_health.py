"""The collector's gap tracking and the OPS-1 collection-health alert."""

from __future__ import annotations

from datetime import datetime, timedelta

from hpcscope.model.alerts import Vector
from hpcscope.service.collect.health import RULE_ID, CollectionHealth

T0 = datetime(2026, 3, 1, 12, 0, 0)
URL = "http://gpu01:9400/metrics"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_steady_scrapes_make_no_gap() -> None:
    health = CollectionHealth(silence_seconds=7.0)
    for second in range(20):
        assert health.observe(URL, "gpu01", at(second), ok=True, error=None) == (None, None)


def test_a_restart_after_silence_closes_a_gap_from_the_last_success() -> None:
    health = CollectionHealth(silence_seconds=7.0, collected_until={URL: at(0)})
    gap, alert = health.observe(URL, "gpu01", at(30), ok=True, error=None)
    assert gap is not None and (gap.start_ts, gap.end_ts) == (at(0), at(30))
    assert "collector was not running" in gap.reason
    assert alert is not None and alert.rule_id == RULE_ID
    assert alert.vector is Vector.SERVICE_LEVEL and alert.subject == URL
    assert "30 s" in alert.title


def test_a_silence_shorter_than_the_threshold_is_no_gap() -> None:
    health = CollectionHealth(silence_seconds=7.0, collected_until={URL: at(0)})
    assert health.observe(URL, "gpu01", at(6), ok=True, error=None) == (None, None)


def test_failures_alert_once_while_ongoing_and_again_when_the_gap_closes() -> None:
    health = CollectionHealth(silence_seconds=7.0, collected_until={URL: at(0)})
    alerts = []
    for second in range(1, 20):
        gap, alert = health.observe(URL, "gpu01", at(second), ok=False, error="timed out")
        assert gap is None
        if alert is not None:
            alerts.append(alert)
    assert len(alerts) == 1 and "not collected for 7 s" in alerts[0].title
    gap, alert = health.observe(URL, "gpu01", at(20), ok=True, error=None)
    assert gap is not None and gap.reason == "timed out" and gap.start_ts == at(0)
    assert alert is not None and alert.key == alerts[0].key  # one outage, one alert


def test_a_single_failed_scrape_is_a_gap_without_an_alert() -> None:
    health = CollectionHealth(silence_seconds=7.0, collected_until={URL: at(0)})
    health.observe(URL, "gpu01", at(1), ok=False, error="HTTP 500")
    gap, alert = health.observe(URL, "gpu01", at(2), ok=True, error=None)
    assert gap is not None and gap.seconds == 2.0 and alert is None


def test_close_open_ends_the_failing_gaps_and_accounts_for_them() -> None:
    health = CollectionHealth(silence_seconds=7.0, collected_until={URL: at(0)})
    health.observe(URL, "gpu01", at(1), ok=False, error="refused")
    (gap,) = health.close_open(at(5))
    assert (gap.start_ts, gap.end_ts, gap.reason) == (at(0), at(5), "refused")
    # a restart right after the clean stop does not record the same span twice
    assert health.observe(URL, "gpu01", at(6), ok=True, error=None) == (None, None)
