"""People for the identity tests: the demo users plus a security engineer and an auditor.

``sam`` (security) and ``audrey`` (auditor) own no job of the fleet (``tests/support/fleet.py``):
what they see beyond the nothing a researcher without jobs sees is what their role adds.
"""

from __future__ import annotations

from hpcscope.model.access import Role
from hpcscope.service.identity.users import DEMO_LOGINS, UserDirectory, UserRecord, hash_password

#: scrypt cost of the tests (see tests/conftest.py)
COST_LOG2 = 4

EXTRA = {"sam": (Role.SECURITY, "sam-test"), "audrey": (Role.AUDITOR, "audrey-test")}
PASSWORDS = {login.name: login.password for login in DEMO_LOGINS} | {
    name: password for name, (_, password) in EXTRA.items()
}
ROLES = {login.name: login.role for login in DEMO_LOGINS} | {
    name: role for name, (role, _) in EXTRA.items()
}


def identity_users() -> UserDirectory:
    """The demo users and sam and audrey, hashed at the tests' low cost."""
    records = [
        UserRecord(
            d.name,
            d.role,
            hash_password(d.password, cost_log2=COST_LOG2),
            d.accounts,
            d.coordinates,
        )
        for d in DEMO_LOGINS
    ]
    records += [
        UserRecord(name, role, hash_password(password, cost_log2=COST_LOG2), (), ())
        for name, (role, password) in EXTRA.items()
    ]
    return UserDirectory(records, hash_cost_log2=COST_LOG2)
