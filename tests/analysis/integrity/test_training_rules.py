"""W-4 and DP-5 on hand-made events: who produced a loaded file decides W-4; DP-5 wants a
robust outlier shard in enough windows."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.integrity.training import (
    Placed,
    Producer,
    dp5_shard_outliers,
    training_alerts,
    w4_unsafe_loads,
)
from hpcscope.model.alerts import Severity
from hpcscope.model.training_events import TrainingEvent
from hpcscope.service.alerts.rules import load_site_rules

RULES = load_site_rules(None)
TS = 1_796_126_400.0


def _load(path: str, weights_only: bool, owner: str | None = None) -> Placed:
    event = TrainingEvent("load", "4410001", "gpu01", 0, 0, 5100, TS, path=path,
                          weights_only=weights_only, owner=owner, source="f", line=1)  # fmt: skip
    return Placed(event, "4410001", "alice", "vision")


def test_w4_fires_on_an_unsafe_load_of_another_accounts_file() -> None:
    producers = {
        "/ck/nlp.pt": Producer("4410002", "nlp"),
        "/ck/own.pt": Producer("4410006", "vision"),
    }
    loads = [_load("/ck/nlp.pt", False), _load("/ck/nlp.pt", False), _load("/ck/own.pt", False),
             _load("/ck/nlp.pt", True)]  # fmt: skip
    [alert] = w4_unsafe_loads(RULES["W-4"], loads, producers)
    assert (alert.rule_id, alert.subject, alert.job_id, alert.account, alert.gpu) == (
        "W-4", "/ck/nlp.pt", "4410001", "vision", 0)  # fmt: skip
    assert alert.severity is Severity.MEDIUM
    assert "made by job 4410002 of account nlp" in alert.evidence[0].summary
    assert "2 time(s)" in alert.evidence[0].summary


def test_w4_without_a_changelog_record_trusts_only_the_users_own_files() -> None:
    spec = RULES["W-4"]
    assert w4_unsafe_loads(spec, [_load("/home/alice/m.pt", False, owner="alice")], {}) == []
    found = w4_unsafe_loads(spec, [_load("/tmp/m.pt", False, owner="mallory")], {})
    assert [a.subject for a in found] == ["/tmp/m.pt"]
    assert "file owner mallory" in found[0].evidence[0].summary
    assert len(w4_unsafe_loads(spec, [_load("/tmp/x.pt", False)], {})) == 1  # unknown: fires


def test_w4_spares_trusted_accounts() -> None:
    spec = replace(RULES["W-4"], lists={"trusted_accounts": ("model-registry",)})
    producers = {"/zoo/llama.pt": Producer("99", "model-registry")}
    assert w4_unsafe_loads(spec, [_load("/zoo/llama.pt", False)], producers) == []


def _windows(losses: list[dict[str, float]]) -> list[Placed]:
    return [
        Placed(TrainingEvent("shard_loss", "4410001", "gpu01", 0, 0, 5100, TS + 120 * w,
                             window=w, shards={s: (v, 8) for s, v in per.items()}, source="f",
                             line=w + 1), "4410001", "alice", "vision")
        for w, per in enumerate(losses)
    ]  # fmt: skip


def _shards(bad: float) -> dict[str, float]:
    return {f"s{i}": 2.0 + 0.01 * i for i in range(8)} | {"s-bad": 2.04 + bad}


def test_dp5_needs_the_outlier_in_enough_windows() -> None:
    spec = RULES["DP-5"]
    hits = int(spec.threshold("min_windows"))
    quiet, loud = _shards(0.0), _shards(1.0)
    [alert] = dp5_shard_outliers(spec, _windows([quiet] + [loud] * hits))
    assert (alert.subject, alert.severity) == ("shard s-bad", Severity.LOW)
    assert dp5_shard_outliers(spec, _windows([quiet] + [loud] * (hits - 1) + [quiet])) == []


def test_dp5_does_not_judge_windows_with_few_shards() -> None:
    spec = RULES["DP-5"]
    few = {"a": 2.0, "b": 2.01, "c": 9.0}
    assert dp5_shard_outliers(spec, _windows([few] * 6)) == []


def test_ranks_of_one_window_are_combined_by_batches() -> None:
    spec = RULES["DP-5"]
    windows = _windows([_shards(0.0)] * 4)
    # a second rank sees s-bad with a huge loss but a single batch against 8: diluted
    extra = [replace(p, event=replace(p.event, rank=1, gpu=1, shards={"s-bad": (2.4, 1)}))
             for p in windows]  # fmt: skip
    assert dp5_shard_outliers(spec, windows + extra) == []
    assert training_alerts(windows, {}, RULES) == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=10), st.floats(0.5, 5.0))
def test_dp5_fires_exactly_when_enough_windows_are_outliers(hot: list[bool], bad: float) -> None:
    spec = RULES["DP-5"]
    found = dp5_shard_outliers(spec, _windows([_shards(bad if h else 0.0) for h in hot]))
    assert len(found) == (1 if sum(hot) >= spec.threshold("min_windows") else 0)
