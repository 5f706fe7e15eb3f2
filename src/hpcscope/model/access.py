"""Who may see what: principals, roles and the job-visibility rule.

The rule (Slurm is the authority, as with ``PrivateData=jobs``): a user reads job J iff J's user
is them, or they coordinate J's account (team lead), or they are an admin or an auditor.
Everything that serves job data asks :meth:`Principal.can_see_job` or uses
:meth:`Principal.job_scope` to constrain a query at the data layer; nothing filters in the
browser.

The five roles (``docs/identity.md`` has the full table):

=========== ============================== ================== ========== ====================
role        jobs (reports, series, traces) alerts             changes    weight file paths
=========== ============================== ================== ========== ====================
researcher  own                            own jobs'          own jobs   shown
team_lead   own + coordinated accounts'    same as jobs       own jobs   shown
security    own (+ coordinated accounts')  all, any job       all alerts shown
auditor     all                            all                none       redacted
admin       all                            all                all        shown
=========== ============================== ================== ========== ====================

A principal may also be *read-only* (an API token of scope ``read``): it reads what its role
reads and changes nothing (the web layer refuses its state-changing requests in one place).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a person is to the platform."""

    RESEARCHER = "researcher"
    TEAM_LEAD = "team_lead"
    ADMIN = "admin"
    #: the security team: every alert and every access record, job data as a researcher
    SECURITY = "security"
    #: read-only everything, with the file paths of model weights redacted
    AUDITOR = "auditor"


class TokenScope(StrEnum):
    """What an API token may do: ``read`` (GET only) or ``admin`` (the full rights of an admin;
    only an admin may create one)."""

    READ = "read"
    ADMIN = "admin"


#: Roles whose job scope is every job.
_ALL_JOBS_ROLES = frozenset({Role.ADMIN, Role.AUDITOR})
#: Roles that see every alert, whatever job it is on.
_ALL_ALERTS_ROLES = frozenset({Role.ADMIN, Role.SECURITY, Role.AUDITOR})


#: Roles that see every access record of every protected path ("who read my weights"), not
#: only those of their own paths and jobs. The one place that decides it
#: (:attr:`Principal.sees_all_access_records`). Not the auditor: access records are file paths
#: of weights and checkpoints, which auditors never see (:attr:`redacts_weight_paths`).
ACCESS_RECORD_ROLES: frozenset[Role] = frozenset({Role.ADMIN, Role.SECURITY})


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
        role: researcher, team lead, security, auditor or admin.
        coordinated_accounts: accounts this person coordinates (team lead of).
        read_only: authenticated by a ``read`` API token: reads only, never a change.
        via: how the request authenticated (``session``, ``basic``, ``token``, ``proxy``), for
            audit lines.
    """

    name: str
    role: Role
    coordinated_accounts: frozenset[str] = frozenset()
    read_only: bool = False
    via: str = "session"

    @property
    def is_admin(self) -> bool:
        """Admin visibility (all jobs, idle GPUs' counters, ``/metrics``); a read-only admin
        token keeps it, and still changes nothing (:attr:`may_change`)."""
        return self.role is Role.ADMIN

    @property
    def may_change(self) -> bool:
        """Whether this principal may change anything at all (alert states, uploads): not an
        auditor, not a read-only token. Its own API tokens are the exception the web layer
        makes (an auditor creates and revokes read tokens for its scripts)."""
        return not self.read_only and self.role is not Role.AUDITOR

    @property
    def sees_all_alerts(self) -> bool:
        """Admins, the security team and auditors see every alert, on any job or none."""
        return self.role in _ALL_ALERTS_ROLES

    @property
    def sees_all_access_records(self) -> bool:
        """Whether this principal sees every access record of every protected path (else:
        the records of paths their jobs created and of accesses by their jobs): admin and
        security (:data:`ACCESS_RECORD_ROLES`)."""
        return self.role in ACCESS_RECORD_ROLES

    @property
    def redacts_weight_paths(self) -> bool:
        """Auditors read everything but the file paths of model weights and checkpoints."""
        return self.role is Role.AUDITOR

    @property
    def sees_all_tokens(self) -> bool:
        """Admins and auditors list every API token (never a secret); others their own."""
        return self.role in _ALL_JOBS_ROLES

    def may_grant(self, scope: TokenScope) -> bool:
        """Whether this principal may create a token of ``scope``: never more than its role
        (``admin`` for an admin only), and never from a read-only token."""
        if self.read_only:
            return False
        return scope is TokenScope.READ or self.role is Role.ADMIN

    def access_record_scope(self) -> JobScope:
        """The jobs whose paths and accesses this principal sees in access records: all when
        :attr:`sees_all_access_records`, none for an auditor (every record is a weight path,
        which auditors never see), else their :meth:`job_scope`."""
        if self.sees_all_access_records:
            return JobScope(all_jobs=True)
        if self.redacts_weight_paths:
            return JobScope(all_jobs=False)
        return self.job_scope()

    def job_scope(self) -> JobScope:
        """The jobs this principal may see, as a constraint the store applies."""
        if self.role in _ALL_JOBS_ROLES:
            return JobScope(all_jobs=True)
        return JobScope(
            all_jobs=False,
            users=frozenset({self.name}),
            accounts=self.coordinated_accounts
            if self.role in (Role.TEAM_LEAD, Role.SECURITY)
            else frozenset(),
        )

    def alert_scope(self) -> JobScope:
        """The alerts this principal may see, by their job: every alert for admins, the
        security team and auditors, else the alerts of the jobs in :meth:`job_scope`."""
        if self.sees_all_alerts:
            return JobScope(all_jobs=True)
        return self.job_scope()

    def can_see_job(self, *, user: str | None, account: str | None) -> bool:
        """Whether this principal may read a job of ``user`` charged to ``account``."""
        return self.job_scope().admits(user=user, account=account)


def system_principal(purpose: str) -> Principal:
    """An admin principal for hpcscope's own reads on behalf of a trusted path, never a person:
    ``/metrics`` (which requires an admin to scrape it) and offline reads of a store file
    (which require access to the file itself). ``purpose`` names it in logs."""
    return Principal(name=f"hpcscope:{purpose}", role=Role.ADMIN)


def derive_role(site_role: Role | None, *, coordinated_in_slurm: frozenset[str]) -> Role:
    """A person's role from the site file and Slurm associations together.

    The site file decides when it names the person, except that a researcher who coordinates
    an account in Slurm (``sacctmgr show user withcoord``) is that account's team lead. A person
    the site file does not name but Slurm knows is a researcher, or a team lead when they
    coordinate. Whether a person is known at all is the caller's question (the file names
    them, or Slurm has an association of theirs).

    Args:
        site_role: the role in the users file, None when the file does not name the person.
        coordinated_in_slurm: the accounts Slurm says they coordinate.
    """
    if site_role is None:
        return Role.TEAM_LEAD if coordinated_in_slurm else Role.RESEARCHER
    if site_role is Role.RESEARCHER and coordinated_in_slurm:
        return Role.TEAM_LEAD
    return site_role


#: Extensions of weight and checkpoint files (``security.md`` §7; a topology may add more).
WEIGHT_EXTENSIONS: tuple[str, ...] = ("safetensors", "pt", "pth", "bin", "ckpt", "distcp")
#: What a redacted path reads as.
REDACTED_PATH = "[weights path redacted]"
_PATH = re.compile(r"""(?<![\w.])/[^\s'"<>,;()\[\]{}]+""")


@dataclass(frozen=True, slots=True)
class WeightPaths:
    """Which file paths are model weights: under a checkpoint root, or with a weight
    extension. :meth:`redact` hides them from an auditor (:attr:`Principal.redacts_weight_paths`).

    Attributes:
        roots: directory prefixes (``/lustre/ckpt``), with or without the trailing slash.
        extensions: file extensions without the dot (``safetensors``).
    """

    roots: tuple[str, ...] = ()
    extensions: tuple[str, ...] = WEIGHT_EXTENSIONS

    def is_weights(self, path: str) -> bool:
        """Whether ``path`` is under a root or ends in a weight extension (case-insensitive)."""
        lowered = "/" + path.lower().strip("/")  # file:///a/b -> /a/b
        if any(lowered.endswith(f".{ext.lower().lstrip('.')}") for ext in self.extensions):
            return True
        for root in self.roots:
            clean = root.rstrip("/").lower()
            if clean and (lowered == clean or lowered.startswith(clean + "/")):
                return True
        return False

    def redact(self, text: str) -> str:
        """``text`` with every absolute path that is weights replaced by
        :data:`REDACTED_PATH` (other paths, ``/tmp/payload``, stay)."""
        return _PATH.sub(
            lambda m: REDACTED_PATH if self.is_weights(m.group(0)) else m.group(0), text
        )
