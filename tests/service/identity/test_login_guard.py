"""The failed-login throttle: limits per user name and per address, backoff, audit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.service.identity.login_guard import LoginGuard


class FakeClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def test_the_eleventh_failure_within_a_minute_is_refused() -> None:
    clock = FakeClock()
    guard = LoginGuard(max_failures=10, clock=clock)
    for _ in range(10):
        assert guard.retry_after_seconds("bob", "10.0.0.1") == 0
        guard.record_failure("bob", "10.0.0.1")
        clock.now += 1
    assert guard.retry_after_seconds("bob", "10.0.0.1") > 0
    kinds = [r.kind for r in guard.audit]
    assert kinds.count("failure") == 10
    assert [r.key for r in guard.audit if r.kind == "lockout"] == ["user", "address"]
    assert kinds[-1] == "refused"


def test_failures_spread_over_more_than_a_minute_never_lock() -> None:
    clock = FakeClock()
    guard = LoginGuard(max_failures=10, clock=clock)
    for _ in range(50):
        assert guard.retry_after_seconds("bob", "10.0.0.1") == 0
        guard.record_failure("bob", "10.0.0.1")
        clock.now += 7  # 9 failures per 63 s
    assert not [r for r in guard.audit if r.kind == "lockout"]


def test_the_user_name_locks_whatever_the_address() -> None:
    guard = LoginGuard(max_failures=3, clock=FakeClock())
    for i in range(3):
        guard.record_failure("carol", f"10.0.0.{i}")
    assert guard.retry_after_seconds("carol", "10.9.9.9") == 60
    assert guard.retry_after_seconds("alice", "10.9.9.9") == 0


def test_the_address_locks_whatever_the_user_name() -> None:
    guard = LoginGuard(max_failures=3, clock=FakeClock())
    for name in ("a", "b", "c"):
        guard.record_failure(name, "192.0.2.7")
    assert guard.retry_after_seconds("alice", "192.0.2.7") == 60
    assert guard.retry_after_seconds("alice", "192.0.2.8") == 0


def test_repeated_lockouts_double_up_to_the_cap() -> None:
    clock = FakeClock()
    guard = LoginGuard(max_failures=2, window_seconds=60, max_lockout_seconds=300, clock=clock)
    lengths = []
    for _ in range(5):
        guard.record_failure("bob", "10.0.0.1")
        guard.record_failure("bob", "10.0.0.1")
        lengths.append(guard.retry_after_seconds("bob", "10.0.0.1"))
        clock.now += lengths[-1]
    assert lengths == [60, 120, 240, 300, 300]


def test_a_success_clears_the_user_name_but_not_the_address() -> None:
    guard = LoginGuard(max_failures=2, clock=FakeClock())
    guard.record_failure("bob", "10.0.0.1")
    guard.record_success("bob")
    guard.record_failure("bob", "10.0.0.2")
    assert guard.retry_after_seconds("bob", "10.0.0.3") == 0
    guard.record_failure("eve", "10.0.0.1")
    assert guard.retry_after_seconds("x", "10.0.0.1") == 60


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("xyz")), max_size=60))
def test_a_key_never_locks_before_its_limit(tries: list[tuple[str, str]]) -> None:
    guard = LoginGuard(max_failures=5, clock=FakeClock())
    per_user: dict[str, int] = {}
    per_address: dict[str, int] = {}
    for user, address in tries:
        locked = guard.retry_after_seconds(user, address) > 0
        below = per_user.get(user, 0) < 5 and per_address.get(address, 0) < 5
        if below:
            assert not locked
        if locked:
            continue
        guard.record_failure(user, address)
        per_user[user] = per_user.get(user, 0) + 1
        per_address[address] = per_address.get(address, 0) + 1


def test_the_audit_log_is_bounded() -> None:
    clock = FakeClock()
    guard = LoginGuard(max_failures=10_000, clock=clock)
    for i in range(3000):
        guard.record_failure(f"u{i}", "10.0.0.1")
    assert len(guard.audit) == 1000
    assert guard.audit[-1].user == "u2999"


def test_tried_names_are_kept_short() -> None:
    guard = LoginGuard(max_failures=2, clock=FakeClock())
    guard.record_failure("x" * 100_000, "10.0.0.1")
    guard.record_failure("x" * 100_001, "10.0.0.2")
    assert len(guard.audit[0].user) == 256
    assert guard.retry_after_seconds("x" * 300, "10.0.0.3") == 60  # the same (cut) name
