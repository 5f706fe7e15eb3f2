"""The user directory's answer to an unknown name costs what a wrong password costs."""

from __future__ import annotations

import base64
import hashlib

from hpcscope.model.access import Role
from hpcscope.service.identity.users import UserDirectory, UserRecord, hash_password


def _cheap_hash(password: str, n: int) -> str:
    salt = b"s" * 16
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=8, p=1)
    return "$".join(
        [
            "scrypt",
            str(n),
            "8",
            "1",
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        ]
    )


def test_unknown_users_are_verified_against_a_hash_of_the_users_own_cost() -> None:
    directory = UserDirectory(
        [UserRecord("bob", Role.RESEARCHER, _cheap_hash("pw", 2**10), (), ())]
    )
    assert directory.authenticate("nobody", "pw") is None
    assert directory.authenticate("bob", "pw") is not None
    dummy = directory._dummy_hash()
    assert dummy.split("$")[:4] == ["scrypt", "1024", "8", "1"]
    assert directory._dummy_hash() is dummy  # computed once, not per request


def test_without_users_the_dummy_follows_hash_password() -> None:
    directory = UserDirectory([])
    assert directory.authenticate("nobody", "pw") is None
    assert directory._dummy_hash().split("$")[:4] == hash_password("x").split("$")[:4]


def test_the_dummy_takes_the_most_common_cost_among_the_users() -> None:
    users = [
        UserRecord("old", Role.RESEARCHER, _cheap_hash("pw", 2**8), (), ()),
        UserRecord("a", Role.RESEARCHER, _cheap_hash("pw", 2**10), (), ()),
        UserRecord("b", Role.ADMIN, _cheap_hash("pw", 2**10), (), ()),
    ]
    directory = UserDirectory(users)
    directory.warm_up()
    assert directory._dummy_hash().split("$")[1] == "1024"
