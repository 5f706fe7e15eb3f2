"""The user directory: who can log in, their role, and the accounts they coordinate.

A site maps its identity provider onto POSIX user names (the names Slurm knows). This module
holds the simplest source, a YAML users file with scrypt password hashes, and the demo users.
Team leads' coordinated accounts come from the file and from Slurm associations (``sacctmgr``
coordinators, ingested when ``slurm_associations`` is on); a researcher Slurm names as an
account's coordinator is that account's team lead (:func:`hpcscope.model.access.derive_role`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpcscope.model import bounded_yaml
from hpcscope.model.access import Principal, Role, derive_role
from hpcscope.model.errors import ConfigError
from hpcscope.service.settings import DEFAULT_PASSWORD_HASH_COST_LOG2
from hpcscope.service.snapshots import SnapshotMiss, caching_only

log = logging.getLogger(__name__)

#: Production scrypt cost (the ``password_hash_cost_log2`` setting's default). Tests lower it;
#: the parameters are in every hash, so hashes made at any cost keep verifying.
DEFAULT_HASH_COST_LOG2 = DEFAULT_PASSWORD_HASH_COST_LOG2
_SCRYPT_R, _SCRYPT_P = 8, 1


def hash_password(
    password: str, *, salt: bytes | None = None, cost_log2: int = DEFAULT_HASH_COST_LOG2
) -> str:
    """An scrypt hash in the form ``scrypt$n$r$p$salt$hash`` (base64).

    Args:
        password: the clear-text password.
        salt: 16 random bytes when None.
        cost_log2: scrypt's CPU/memory cost is ``n = 2**cost_log2``.

    Raises:
        ValueError: ``cost_log2`` below 1.
    """
    if cost_log2 < 1:
        raise ValueError(f"password hash cost_log2 must be at least 1, got {cost_log2}")
    n = 2**cost_log2
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=_SCRYPT_R, p=_SCRYPT_P)
    return "$".join(
        [
            "scrypt",
            str(n),
            str(_SCRYPT_R),
            str(_SCRYPT_P),
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        ]
    )


def verify_password(password: str, encoded: str) -> bool:
    """Constant-time check of ``password`` against an ``scrypt$...`` hash.

    The hash's own parameters (``n``, ``r``, ``p``) are used, whatever the current cost setting.
    """
    try:
        scheme, n, r, p, salt_b64, hash_b64 = encoded.split("$")
        if scheme != "scrypt":
            return False
        salt, expected = base64.b64decode(salt_b64), base64.b64decode(hash_b64)
        digest = hashlib.scrypt(password.encode(), salt=salt, n=int(n), r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


def _rehash_like(encoded: str, salt: bytes) -> str | None:
    """A random password hashed with the scheme and cost parameters of ``encoded`` (so that
    verifying it costs what verifying ``encoded`` costs); None if ``encoded`` is no scrypt hash."""
    try:
        scheme, n, r, p, _, hash_b64 = encoded.split("$")
        if scheme != "scrypt":
            return None
        length = len(base64.b64decode(hash_b64))
        digest = hashlib.scrypt(
            secrets.token_bytes(16), salt=salt, n=int(n), r=int(r), p=int(p), dklen=length
        )
    except (ValueError, TypeError):
        return None
    return "$".join(
        [scheme, n, r, p, base64.b64encode(salt).decode(), base64.b64encode(digest).decode()]
    )


class _UserEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    role: Role
    password_hash: str
    accounts: list[str] = Field(default_factory=list)
    coordinates: list[str] = Field(default_factory=list)


class _UsersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    users: list[_UserEntry]


@dataclass(frozen=True, slots=True)
class UserRecord:
    name: str
    role: Role
    password_hash: str
    accounts: tuple[str, ...]
    coordinates: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DemoLogin:
    name: str
    password: str
    role: Role
    accounts: tuple[str, ...]
    coordinates: tuple[str, ...]


#: The demo cluster's people: two teams' researchers, a team lead of both, an admin.
DEMO_LOGINS: tuple[DemoLogin, ...] = (
    DemoLogin("alice", "alice-demo", Role.RESEARCHER, ("vision",), ()),
    DemoLogin("bob", "bob-demo", Role.RESEARCHER, ("nlp",), ()),
    DemoLogin("dave", "dave-demo", Role.RESEARCHER, ("speech",), ()),
    DemoLogin("carol", "carol-demo", Role.TEAM_LEAD, ("vision", "nlp"), ("vision", "nlp")),
    DemoLogin("admin", "admin-demo", Role.ADMIN, (), ()),
)


class UserDirectory:
    """Look up and authenticate users.

    Args:
        users: the people who can log in.
        hash_cost_log2: scrypt cost of the hashes this directory makes (the demo's, and the
            dummy hash that makes an unknown name cost as much as a wrong password).
    """

    #: How long a verified (user, password) pair is remembered: scrypt is deliberately slow
    #: (~50 ms), and scripts send HTTP Basic credentials on every request.
    CACHE_SECONDS = 60.0
    #: A remembered success used in its last this many seconds is verified again behind the
    #: request, on a thread of its own: every client of one user used to miss at the same
    #: instant each minute and queue behind one scrypt.
    AHEAD_SECONDS = 15.0

    def __init__(
        self,
        users: list[UserRecord],
        *,
        hash_cost_log2: int = DEFAULT_HASH_COST_LOG2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._users = {user.name: user for user in users}
        self._hash_cost_log2 = hash_cost_log2
        self._cache_key = secrets.token_bytes(32)
        self._verified: dict[bytes, float] = {}
        self._verifying: dict[bytes, Future[bool]] = {}
        self._lock = threading.Lock()
        self._dummy: str | None = None

    @classmethod
    def from_file(
        cls, path: str | Path, *, hash_cost_log2: int = DEFAULT_HASH_COST_LOG2
    ) -> UserDirectory:
        """Load a users file (its hashes verify at whatever cost they were made with).

        Raises:
            SourceError: unreadable or invalid, naming the file and field.
        """
        try:
            raw = bounded_yaml.safe_load(Path(path).read_text(encoding="utf-8"), source=str(path))
            parsed = _UsersFile.model_validate(raw)
        except OSError as exc:
            raise ConfigError(f"cannot read users file: {exc.strerror}", source=str(path)) from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=str(path)
            ) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"not valid YAML: {exc}", source=str(path)) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(
                first["msg"], source=str(path), field=".".join(str(p) for p in first["loc"])
            ) from None
        return cls(
            [
                UserRecord(u.name, u.role, u.password_hash, tuple(u.accounts), tuple(u.coordinates))
                for u in parsed.users
            ],
            hash_cost_log2=hash_cost_log2,
        )

    @classmethod
    def demo(cls, *, hash_cost_log2: int = DEFAULT_HASH_COST_LOG2) -> UserDirectory:
        """The demo users with their published passwords (never use outside the demo)."""
        salt = b"hpcscope-demo-salt"  # fixed so start-up stays fast and deterministic
        return cls(
            [
                UserRecord(
                    d.name,
                    d.role,
                    hash_password(d.password, salt=salt, cost_log2=hash_cost_log2),
                    d.accounts,
                    d.coordinates,
                )
                for d in DEMO_LOGINS
            ],
            hash_cost_log2=hash_cost_log2,
        )

    def _dummy_hash(self) -> str:
        """A hash of a random password made like most users' own (their most common scrypt
        parameters; :func:`hash_password`'s without users), computed once: verifying an unknown
        name then costs what verifying a wrong password costs."""
        if self._dummy is None:
            salt = secrets.token_bytes(16)
            hashes = [user.password_hash for user in self._users.values()]
            costs = Counter("$".join(encoded.split("$")[:4]) for encoded in hashes)
            for cost, _ in costs.most_common():
                example = next(e for e in hashes if e.startswith(cost))
                self._dummy = _rehash_like(example, salt)
                if self._dummy is not None:
                    break
            if self._dummy is None:
                self._dummy = hash_password(
                    secrets.token_urlsafe(16), salt=salt, cost_log2=self._hash_cost_log2
                )
        return self._dummy

    def warm_up(self) -> None:
        """Compute the dummy hash now (a server calls this at start), so that not even the
        first unknown name is answered slower."""
        self._dummy_hash()

    def get(self, name: str) -> UserRecord | None:
        return self._users.get(name)

    def names(self) -> list[str]:
        return sorted(self._users)

    def authenticate(self, name: str, password: str) -> UserRecord | None:
        """The user if the password matches, else None (same work either way). A remembered
        success used in its last :attr:`AHEAD_SECONDS` is verified again on a thread of its own.

        Raises:
            SnapshotMiss: inside :func:`~hpcscope.service.snapshots.cache_only` (the event
                loop), for any check but a remembered success: hashing is a worker's job.
        """
        user = self._users.get(name)
        if user is None and caching_only():
            raise SnapshotMiss(("users.authenticate", name))
        if user is None:
            # one verification at the real users' cost, as for a wrong password: the time
            # of the answer does not tell whether the name exists
            verify_password(password, self._dummy_hash())
            return None
        # remember successes only, keyed by an HMAC under a per-process key (never the password)
        key = hmac.new(self._cache_key, f"{name}\0{password}".encode(), "sha256").digest()
        now = self._clock()
        until = self._verified.get(key, 0.0)
        if until > now:
            if until - now < self.AHEAD_SECONDS:
                self._verify_ahead(key, user, password)
            return user
        if caching_only():
            raise SnapshotMiss(("users.authenticate", name))
        # one verification at a time per name and password: when a remembered success runs
        # out, a script's concurrent requests wait for one scrypt rather than each running one
        with self._lock:
            running = self._verifying.get(key)
            mine = running is None
            if running is None:
                running = self._verifying[key] = Future()
        if not mine:
            return user if running.result() else None
        return user if self._verify(key, user, password, running) else None

    def _verify(self, key: bytes, user: UserRecord, password: str, running: Future[bool]) -> bool:
        """Verify ``password`` against ``user``'s hash and remember a success; ``running``
        (registered under ``key``) gets the answer."""
        try:
            good = verify_password(password, user.password_hash)
        except BaseException as exc:
            running.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._verifying.pop(key, None)
        if good:
            with self._lock:
                if len(self._verified) > 10_000:
                    self._verified.clear()
                self._verified[key] = self._clock() + self.CACHE_SECONDS
        running.set_result(good)
        return good

    def _verify_ahead(self, key: bytes, user: UserRecord, password: str) -> None:
        """:meth:`_verify` on a thread of its own, unless one runs for ``key`` already."""
        with self._lock:
            if key in self._verifying:
                return
            running: Future[bool] = Future()
            self._verifying[key] = running

        def verify() -> None:
            try:
                self._verify(key, user, password, running)
            except Exception:  # the success runs out as before; the next request verifies
                log.exception("verifying a password again failed")

        threading.Thread(target=verify, name="password-verify", daemon=True).start()

    def principal(
        self,
        name: str,
        *,
        coordinated_from_slurm: frozenset[str] = frozenset(),
        known_to_slurm: bool = False,
    ) -> Principal | None:
        """The principal for ``name``: its role from the file and Slurm together
        (:func:`~hpcscope.model.access.derive_role`), coordinated accounts from both.

        Args:
            name: the POSIX user name.
            coordinated_from_slurm: accounts Slurm says ``name`` coordinates.
            known_to_slurm: Slurm has an association of ``name``; a person the file does not
                name is then a researcher (a team lead when coordinating). Only identities
                vouched for elsewhere (a trusted proxy, a token made while so known) reach
                this: a password login needs the file.
        """
        user = self._users.get(name)
        if user is None and not known_to_slurm:
            return None
        coordinated = frozenset(user.coordinates if user else ()) | coordinated_from_slurm
        return Principal(
            name=name,
            role=derive_role(user.role if user else None, coordinated_in_slurm=coordinated),
            coordinated_accounts=coordinated,
        )
