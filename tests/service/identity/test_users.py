"""Password hashes: the production cost is the default, the cost is a setting, and a hash
verifies with the parameters written in it whatever the current cost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from hpcscope.model.access import Role
from hpcscope.model.errors import ConfigError
from hpcscope.service.core import Service
from hpcscope.service.identity.users import (
    DEFAULT_HASH_COST_LOG2,
    UserDirectory,
    UserRecord,
    hash_password,
    verify_password,
)
from hpcscope.service.settings import Settings
from hpcscope.service.snapshots import SnapshotMiss, cache_only
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2

#: Made by the code before the cost was a setting (``hash_password("s3cret", salt=...)``).
STORED_HASH = (
    "scrypt$16384$8$1$Zml4ZWQtc2FsdC0xNmJ5dA==$FwvEu5IVtRNeK/OcRNPpnLPxxareFafgkUQ2vwjsXRQQF+"
    "CzDPYALv/JURmL5JwO6yGjm6ztDAAJukwecNJpzQ=="
)


def test_the_production_cost_is_the_default_and_verifies() -> None:
    assert DEFAULT_HASH_COST_LOG2 == 14
    assert Settings().password_hash_cost_log2 == 14
    encoded = hash_password("s3cret", salt=b"fixed-salt-16byt")
    assert encoded == STORED_HASH  # the production default makes the same hash as before
    assert verify_password("s3cret", encoded)
    assert not verify_password("s3cret!", encoded)
    demo = UserDirectory.demo()
    alice = demo.get("alice")
    assert alice is not None and alice.password_hash.startswith("scrypt$16384$8$1$")
    assert demo.authenticate("alice", "alice-demo") == alice
    assert demo.authenticate("alice", "wrong") is None
    assert demo.authenticate("nobody", "alice-demo") is None


def test_hashes_verify_with_their_own_parameters_whatever_the_cost() -> None:
    low = hash_password("s3cret", cost_log2=TEST_PASSWORD_HASH_COST_LOG2)
    assert low.startswith("scrypt$16$8$1$")
    assert verify_password("s3cret", low)
    assert not verify_password("other", low)
    assert verify_password("s3cret", STORED_HASH)  # an old production hash, checked cheaply nowhere


def test_the_setting_sets_the_cost_of_the_demo_users(tmp_path: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "s.duckdb", password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2
    )
    service = Service.open(settings)
    try:
        bob = service.users.get("bob")
        assert bob is not None and bob.password_hash.startswith("scrypt$16$8$1$")
        assert service.users.authenticate("bob", "bob-demo") == bob
        assert service.users.authenticate("bob", "alice-demo") is None
    finally:
        service.close()


def test_a_users_file_keeps_verifying_at_another_cost(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(f"users:\n  - {{name: erin, role: admin, password_hash: '{STORED_HASH}'}}\n")
    directory = UserDirectory.from_file(users, hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2)
    erin = directory.get("erin")
    assert directory.authenticate("erin", "s3cret") == erin
    assert directory.authenticate("erin", "s3cret ") is None


@pytest.mark.parametrize("cost", [0, 21])
def test_a_cost_out_of_range_is_refused(cost: int) -> None:
    with pytest.raises(ValidationError, match="password_hash_cost_log2"):
        Settings(password_hash_cost_log2=cost)


def test_a_cost_below_one_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cost_log2 must be at least 1"):
        hash_password("x", cost_log2=0)


@pytest.mark.parametrize(
    "encoded", ["", "scrypt$16$8$1$bad", "bcrypt$16$8$1$YQ==$YQ==", "scrypt$x$8$1$YQ==$YQ=="]
)
def test_malformed_hashes_never_verify(encoded: str) -> None:
    assert not verify_password("", encoded)


def test_the_users_file_takes_the_security_and_auditor_roles_and_slurm_adds_leads(
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.yaml"
    users.write_text(
        "users:\n"
        f"  - {{name: sam, role: security, password_hash: '{STORED_HASH}'}}\n"
        f"  - {{name: audrey, role: auditor, password_hash: '{STORED_HASH}'}}\n"
        f"  - {{name: rita, role: researcher, password_hash: '{STORED_HASH}', coordinates: [x]}}\n"
        f"  - {{name: max, role: root, password_hash: '{STORED_HASH}'}}\n"
    )
    with pytest.raises(ConfigError) as bad:
        UserDirectory.from_file(users)
    assert bad.value.field == "users.3.role" and str(users) in str(bad.value)
    users.write_text("\n".join(users.read_text().splitlines()[:-1]) + "\n")
    directory = UserDirectory.from_file(users)
    sam = directory.principal("sam", coordinated_from_slurm=frozenset({"ops"}))
    assert sam is not None and sam.role is Role.SECURITY  # Slurm never changes a file role
    assert sam.coordinated_accounts == {"ops"}
    audrey = directory.principal("audrey")
    assert audrey is not None and audrey.role is Role.AUDITOR and not audrey.may_change
    # the file's researcher who coordinates (in the file or in Slurm) is a team lead
    rita = directory.principal("rita")
    assert rita is not None and rita.role is Role.TEAM_LEAD and rita.job_scope().accounts == {"x"}
    # somebody only Slurm knows: only when known, a researcher or a lead
    assert directory.principal("erin") is None
    erin = directory.principal("erin", known_to_slurm=True)
    assert erin is not None and erin.role is Role.RESEARCHER
    lead = directory.principal("erin", known_to_slurm=True, coordinated_from_slurm=frozenset({"p"}))
    assert lead is not None and lead.role is Role.TEAM_LEAD


def test_a_remembered_success_is_verified_again_before_it_runs_out() -> None:
    """Used in its last ``AHEAD_SECONDS``, a remembered password success is verified again
    behind the request: past its first ``CACHE_SECONDS`` it is still answered on the event
    loop (no miss); a wrong password never is."""
    clock = [1000.0]
    record = UserRecord("alice", Role.RESEARCHER, hash_password("pw", cost_log2=4), ("vision",), ())
    users = UserDirectory([record], clock=lambda: clock[0])
    assert users.authenticate("alice", "pw") is record  # verified: until 1060
    clock[0] = 1040.0  # not in its last 15 s: answered, not verified again
    assert cache_only(users.authenticate, "alice", "pw") is record
    assert not users._verifying
    clock[0] = 1050.0  # in its last 15 s: answered, verified again behind (until 1110)
    assert cache_only(users.authenticate, "alice", "pw") is record
    deadline = time.monotonic() + 10
    while users._verifying and time.monotonic() < deadline:
        time.sleep(0.01)
    clock[0] = 1100.0  # past the first verification's end, within the second's
    assert cache_only(users.authenticate, "alice", "pw") is record
    with pytest.raises(SnapshotMiss):  # never verified: a worker's job
        cache_only(users.authenticate, "alice", "wrong")
    assert users.authenticate("alice", "wrong") is None
    clock[0] = 1200.0  # run out: the loop misses again
    with pytest.raises(SnapshotMiss):
        cache_only(users.authenticate, "alice", "pw")
