"""Who may see what: principals, roles and the job-visibility rule.

The rule (Slurm is the authority, as with ``PrivateData=jobs``): a user reads job J iff J's user
is them, or they coordinate J's account (team lead), or they are an admin. Everything that
serves job data asks :meth:`Principal.can_see_job` or uses :meth:`Principal.job_scope` to
constrain a query at the data layer; nothing filters in the browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a person is to the platform."""

    RESEARCHER = "researcher"
    TEAM_LEAD = "team_lead"
    ADMIN = "admin"


#: Roles that see every access record of every protected path ("who read my weights"), not
#: only those of their own paths and jobs. The one place that decides it
#: (:attr:`Principal.sees_all_access_records`): a security or auditor role joins here.
ACCESS_RECORD_ROLES: frozenset[Role] = frozenset({Role.ADMIN})


@dataclass(frozen=True, slots=True)
class JobScope:
    """A data-layer constraint: ``all_jobs``, or jobs of these users or these accounts.

    Empty ``users`` and ``accounts`` with ``all_jobs`` false means: no job at all (deny by
    default).
    """

    all_jobs: bool
    users: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()

    def admits(self, *, user: str | None, account: str | None) -> bool:
        """Whether a job of ``user`` charged to ``account`` is inside the scope."""
        if self.all_jobs:
            return True
        return (user is not None and user in self.users) or (
            account is not None and account in self.accounts
        )


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated person.

    Attributes:
        name: the POSIX user name (the same as Slurm's ``user``).
        role: researcher, team lead or admin.
        coordinated_accounts: accounts this person coordinates (team lead of).
    """

    name: str
    role: Role
    coordinated_accounts: frozenset[str] = frozenset()

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def sees_all_access_records(self) -> bool:
        """Whether this principal sees every access record of every protected path (else:
        the records of paths their jobs created and of accesses by their jobs)."""
        return self.role in ACCESS_RECORD_ROLES

    def access_record_scope(self) -> JobScope:
        """The jobs whose paths and accesses this principal sees in access records: all when
        :attr:`sees_all_access_records`, else their :meth:`job_scope`."""
        return JobScope(all_jobs=True) if self.sees_all_access_records else self.job_scope()

    def job_scope(self) -> JobScope:
        """The jobs this principal may see, as a constraint the store applies."""
        if self.is_admin:
            return JobScope(all_jobs=True)
        return JobScope(
            all_jobs=False,
            users=frozenset({self.name}),
            accounts=self.coordinated_accounts if self.role is Role.TEAM_LEAD else frozenset(),
        )

    def can_see_job(self, *, user: str | None, account: str | None) -> bool:
        """Whether this principal may read a job of ``user`` charged to ``account``."""
        return self.job_scope().admits(user=user, account=account)


def system_principal(purpose: str) -> Principal:
    """An admin principal for hpcscope's own reads on behalf of a trusted path, never a person:
    ``/metrics`` (which requires an admin to scrape it) and offline reads of a store file
    (which require access to the file itself). ``purpose`` names it in logs."""
    return Principal(name=f"hpcscope:{purpose}", role=Role.ADMIN)
