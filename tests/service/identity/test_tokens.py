"""API tokens over a real store: create, authenticate, expire, revoke, record use; who may
grant which scope; the table added to a store an earlier release wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from hpcscope.model.access import Principal, Role, TokenScope
from hpcscope.model.tokens import token_digest
from hpcscope.service.identity.tokens import (
    ApiTokens,
    TokenGrantDenied,
    TokenRequestError,
    token_principal,
)
from hpcscope.service.snapshots import SnapshotMiss, cache_only
from hpcscope.store import Store
from hpcscope.store import identity as token_store
from hpcscope.store.migrations import MIGRATIONS

NOW = datetime(2026, 12, 1, 12, 0, 0)
ALICE = Principal("alice", Role.RESEARCHER)
ADMIN = Principal("admin", Role.ADMIN)
AUDREY = Principal("audrey", Role.AUDITOR)


@pytest.fixture
def tokens(tmp_path: Path) -> Iterator[ApiTokens]:
    store = Store(tmp_path / "s.duckdb")
    yield ApiTokens(store, max_days=365)
    store.close()


def test_a_token_authenticates_until_it_expires_and_only_its_hash_is_stored(
    tokens: ApiTokens,
) -> None:
    made = tokens.create(ALICE, scope=TokenScope.READ, label="nightly", expires_days=1, now=NOW)
    assert made.token.user == "alice" and made.token.expires_at == NOW + timedelta(days=1)
    found = tokens.authenticate(made.secret, now=NOW + timedelta(hours=1), address="10.0.0.7")
    assert found is not None and found.token_id == made.token.token_id
    assert tokens.authenticate(made.secret, now=NOW + timedelta(days=1), address="x") is None
    stored = tokens.store.query("SELECT * FROM api_tokens").to_pylist()
    assert len(stored) == 1 and made.secret not in str(stored)
    assert stored[0]["secret_sha256"] == token_digest(made.secret)


def test_unknown_malformed_and_revoked_tokens_are_refused(tokens: ApiTokens) -> None:
    made = tokens.create(ALICE, scope=TokenScope.READ, label="ci", expires_days=30, now=NOW)
    other = tokens.create(ALICE, scope=TokenScope.READ, label="ci2", expires_days=30, now=NOW)
    flipped = made.secret[:-1] + ("A" if made.secret[-1] != "A" else "B")
    for bad in (flipped, "hps_" + "0" * 46, "Bearer", ""):
        assert tokens.authenticate(bad, now=NOW, address="x") is None
    assert tokens.authenticate(made.secret, now=NOW, address="x")  # now remembered (cached)
    revoked = tokens.revoke(ALICE, made.token.token_id, now=NOW + timedelta(minutes=5))
    assert revoked is not None and revoked.revoked_by == "alice"
    assert revoked.status(NOW + timedelta(minutes=6)) == "revoked"
    assert tokens.authenticate(made.secret, now=NOW + timedelta(minutes=6), address="x") is None
    assert tokens.authenticate(other.secret, now=NOW + timedelta(minutes=6), address="x")
    # a second revocation keeps the first one's who and when
    again = tokens.revoke(ADMIN, made.token.token_id, now=NOW + timedelta(hours=1))
    assert again is not None and (again.revoked_by, again.revoked_at) == (
        "alice",
        NOW + timedelta(minutes=5),
    )


def test_use_is_recorded_at_most_once_a_minute(tokens: ApiTokens) -> None:
    made = tokens.create(ALICE, scope=TokenScope.READ, label="poll", expires_days=30, now=NOW)
    for second in range(0, 50, 5):
        tokens.authenticate(made.secret, now=NOW + timedelta(seconds=second), address="10.0.0.1")
    tokens.authenticate(made.secret, now=NOW + timedelta(seconds=61), address="10.0.0.2")
    tokens.store.flush()
    (listed,) = tokens.visible_to(ALICE)
    assert (listed.last_used_at, listed.last_used_address) == (
        NOW + timedelta(seconds=61),
        "10.0.0.2",
    )


def test_who_may_grant_which_scope(tokens: ApiTokens) -> None:
    with pytest.raises(TokenGrantDenied):
        tokens.create(ALICE, scope=TokenScope.ADMIN, label="x", expires_days=1, now=NOW)
    with pytest.raises(TokenGrantDenied):
        tokens.create(AUDREY, scope=TokenScope.ADMIN, label="x", expires_days=1, now=NOW)
    with pytest.raises(TokenGrantDenied):  # somebody else's, not being an admin
        tokens.create(
            ALICE, scope=TokenScope.READ, label="x", expires_days=1, now=NOW, for_user="bob"
        )
    read_admin = Principal("admin", Role.ADMIN, read_only=True)
    with pytest.raises(TokenGrantDenied):  # a read token creates no token
        tokens.create(read_admin, scope=TokenScope.READ, label="x", expires_days=1, now=NOW)
    for days in (0, -1, 366):
        with pytest.raises(TokenRequestError):
            tokens.create(ALICE, scope=TokenScope.READ, label="x", expires_days=days, now=NOW)
    with pytest.raises(TokenRequestError):
        tokens.create(ALICE, scope=TokenScope.READ, label="  ", expires_days=1, now=NOW)
    assert tokens.create(AUDREY, scope=TokenScope.READ, label="audit", expires_days=1, now=NOW)
    made = tokens.create(ADMIN, scope=TokenScope.READ, label="for bob", expires_days=1, now=NOW,
                         for_user="bob")  # fmt: skip
    assert (made.token.user, made.token.created_by) == ("bob", "admin")
    assert tokens.create(ADMIN, scope=TokenScope.ADMIN, label="ops", expires_days=1, now=NOW)


def test_listing_and_revoking_other_peoples_tokens(tokens: ApiTokens) -> None:
    bobs = tokens.create(ADMIN, scope=TokenScope.READ, label="b", expires_days=9, now=NOW,
                         for_user="bob")  # fmt: skip
    alices = tokens.create(ALICE, scope=TokenScope.READ, label="a", expires_days=9, now=NOW)
    assert [t.token_id for t in tokens.visible_to(ALICE)] == [alices.token.token_id]
    assert {t.user for t in tokens.visible_to(ADMIN)} == {"alice", "bob"}
    assert {t.user for t in tokens.visible_to(AUDREY)} == {"alice", "bob"}
    assert tokens.revoke(ALICE, bobs.token.token_id, now=NOW) is None  # not hers: not there
    with pytest.raises(TokenGrantDenied):  # the auditor lists it, and changes nothing
        tokens.revoke(AUDREY, bobs.token.token_id, now=NOW)
    assert tokens.revoke(ADMIN, bobs.token.token_id, now=NOW) is not None


def test_a_tokens_rights_are_its_users_current_rights_within_its_scope(tokens: ApiTokens) -> None:
    read = tokens.create(ADMIN, scope=TokenScope.READ, label="r", expires_days=1, now=NOW).token
    full = tokens.create(ADMIN, scope=TokenScope.ADMIN, label="w", expires_days=1, now=NOW).token
    assert token_principal(read, ADMIN).read_only and token_principal(read, ADMIN).is_admin
    assert not token_principal(full, ADMIN).read_only
    demoted = Principal("admin", Role.RESEARCHER)
    assert token_principal(full, demoted).read_only  # an admin token of a former admin reads
    assert not token_principal(full, demoted).is_admin


def test_an_earlier_store_gains_the_token_table_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    earlier = [m for m in MIGRATIONS if m.version < 11]
    with Store(path, migrations=earlier) as old:
        old.submit_write(
            lambda con: con.execute(
                "INSERT INTO account_memberships VALUES ('erin', 'physics', true)"
            )
        ).result()
    with Store(path) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version
        assert token_store.known_to_slurm(upgraded, "erin")
        assert not token_store.known_to_slurm(upgraded, "mallory")
        assert upgraded.coordinated_accounts("erin") == {"physics"}
        assert token_store.tokens(upgraded) == []


def test_a_remembered_token_is_looked_up_again_before_it_runs_out(tmp_path: Path) -> None:
    """Read in its last ``ahead_seconds``, a remembered token is looked up again behind the
    request: past its first ``cache_seconds`` it is still answered without the store (no miss
    on the event loop), and a revocation the store got meanwhile is seen."""
    store = Store(tmp_path / "s.duckdb")
    clock = [100.0]
    try:
        tokens = ApiTokens(store, cache_seconds=30, ahead_seconds=10, clock=lambda: clock[0])
        made = tokens.create(ALICE, scope=TokenScope.READ, label="poll", expires_days=1, now=NOW)
        assert tokens.authenticate(made.secret, now=NOW, address="x") is not None  # until 130
        clock[0] = 115.0  # not in its last 10 s: answered, not looked up
        assert cache_only(tokens.authenticate, made.secret, now=NOW, address="x") is not None
        assert not tokens._looking_up
        clock[0] = 125.0  # in its last 10 s: answered, and looked up again behind (until 155)
        assert cache_only(tokens.authenticate, made.secret, now=NOW, address="x") is not None
        _looked_up(tokens)
        clock[0] = 150.0  # past the first lookup's end, within the second's
        token_store.revoke_token(store, made.token.token_id, by="admin", at=NOW).result()
        assert cache_only(tokens.authenticate, made.secret, now=NOW, address="x") is not None
        _looked_up(tokens)  # in its last 10 s again: the lookup reads the revocation
        assert cache_only(tokens.authenticate, made.secret, now=NOW, address="x") is None
        clock[0] = 200.0  # run out: the loop misses, the worker's lookup refuses it
        with pytest.raises(SnapshotMiss):
            cache_only(tokens.authenticate, made.secret, now=NOW, address="x")
        assert tokens.authenticate(made.secret, now=NOW, address="x") is None
    finally:
        store.close()


def _looked_up(tokens: ApiTokens) -> None:
    """Wait for the lookups behind the requests."""
    deadline = time.monotonic() + 10
    while tokens._looking_up and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not tokens._looking_up


def test_a_use_due_to_be_recorded_is_queued_from_the_event_loop(tokens: ApiTokens) -> None:
    made = tokens.create(ALICE, scope=TokenScope.READ, label="poll", expires_days=1, now=NOW)
    assert tokens.authenticate(made.secret, now=NOW, address="10.0.0.1")
    later = NOW + timedelta(seconds=61)  # due: recorded without leaving the loop
    assert cache_only(tokens.authenticate, made.secret, now=later, address="10.0.0.2")
    tokens.store.flush()
    (listed,) = tokens.visible_to(ALICE)
    assert (listed.last_used_at, listed.last_used_address) == (later, "10.0.0.2")
