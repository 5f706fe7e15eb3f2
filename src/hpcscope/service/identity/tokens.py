"""API tokens for scripts: create (shown once), list, revoke, and authenticate a request.

Rules (``docs/identity.md``):

- A token carries one user's rights, read from the user directory and Slurm **at each
  request** (a demoted user's tokens are demoted with them; a user who is gone, gone too).
- Scope ``read`` reads what the user reads and changes nothing; scope ``admin`` is an admin's
  full rights, granted by and to admins only. A token of scope ``admin`` whose user is no
  longer an admin acts as ``read``.
- Every token expires (``api_token_max_days`` at most) and can be revoked by its user or an
  admin; revoked and expired tokens stay listed.
- The store keeps the SHA-256 of the token (:mod:`hpcscope.model.tokens`). Its use is recorded
  (time, address) at most once a minute per token, so scripts polling every second cost no
  write each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hpcscope.model.access import Principal, Role, TokenScope
from hpcscope.model.errors import AccessError, InputError
from hpcscope.model.tokens import ApiToken, is_well_formed, new_token, token_digest, token_id
from hpcscope.service.snapshots import SnapshotMiss, caching_only
from hpcscope.store import Store
from hpcscope.store import identity as token_store

log = logging.getLogger(__name__)

#: Seconds between two recorded uses of one token.
TOUCH_EVERY_SECONDS = 60.0
#: Seconds a looked-up token is remembered by its digest (a store lookup costs 5-25 ms on a
#: busy server; a revocation here forgets it at once, expiry is checked on every request).
CACHE_SECONDS = 30.0
#: A remembered token read in its last this many seconds is looked up again behind the
#: request, on a thread of its own, so that a script polling with it never waits for the
#: lookup (every client of one token used to miss at the same instant, every 30 s).
LOOKUP_AHEAD_SECONDS = 10.0
#: Longest label, characters.
MAX_LABEL_CHARS = 200


class TokenGrantDenied(AccessError, PermissionError):
    """The principal may not create this token (a scope above its role, a read-only token, or
    a token for somebody else without being an admin)."""


class TokenRequestError(InputError, ValueError):
    """A token request that cannot be met: a bad expiry or label."""


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """A new token: the secret (shown once, never stored) and its record."""

    secret: str
    token: ApiToken


class ApiTokens:
    """The token operations over one store.

    Args:
        store: holds ``api_tokens`` (migration 10).
        max_days: longest lifetime a token may be given.
        cache_seconds: see :data:`CACHE_SECONDS`.
        ahead_seconds: see :data:`LOOKUP_AHEAD_SECONDS`.
        clock: monotonic seconds (a seam for tests).
    """

    def __init__(
        self,
        store: Store,
        *,
        max_days: float = 365.0,
        cache_seconds: float = CACHE_SECONDS,
        ahead_seconds: float = LOOKUP_AHEAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.max_days = max_days
        self.cache_seconds = cache_seconds
        self.ahead_seconds = ahead_seconds
        self._clock = clock
        self._touched: dict[str, datetime] = {}
        self._cache: dict[str, tuple[ApiToken, float]] = {}
        self._looking_up: set[str] = set()
        self._forgotten = 0  # revocations: a lookup started before one is not remembered
        self._lock = threading.Lock()

    def create(
        self,
        principal: Principal,
        *,
        scope: TokenScope,
        label: str,
        expires_days: float,
        now: datetime,
        for_user: str | None = None,
    ) -> CreatedToken:
        """A new token for ``principal`` (or, by an admin, for ``for_user``).

        Raises:
            TokenGrantDenied: scope above the role, a read-only principal, another user's.
            TokenRequestError: expiry not in (0, ``max_days``], a label too long or empty.
        """
        owner = for_user or principal.name
        if owner != principal.name and not (principal.is_admin and principal.may_change):
            raise TokenGrantDenied("only an admin creates tokens for somebody else")
        if not principal.may_grant(scope):
            raise TokenGrantDenied(
                f"a {scope.value} token is more than a {principal.role.value}"
                + (" using a read-only token" if principal.read_only else "")
                + " may grant"
            )
        if owner != principal.name and scope is TokenScope.ADMIN:
            raise TokenGrantDenied("an admin token is created by its own user only")
        if not 0 < expires_days <= self.max_days:
            raise TokenRequestError(
                f"expiry must be more than 0 and at most {self.max_days:g} days, "
                f"not {expires_days:g}"
            )
        label = label.strip()
        if not label or len(label) > MAX_LABEL_CHARS:
            raise TokenRequestError(f"a label of 1 to {MAX_LABEL_CHARS} characters is needed")
        secret = new_token()
        record = ApiToken(
            token_id=token_id(secret),
            user=owner,
            scope=scope,
            label=label,
            created_at=now,
            created_by=principal.name,
            expires_at=now + timedelta(days=expires_days),
        )
        token_store.insert_token(self.store, record, secret_sha256=token_digest(secret)).result()
        log.info(
            "api token %s created for %s by %s: scope %s, expires %s",
            record.token_id,
            owner,
            principal.name,
            scope.value,
            record.expires_at.isoformat(),
        )
        return CreatedToken(secret, record)

    def visible_to(self, principal: Principal) -> list[ApiToken]:
        """The tokens ``principal`` may list: every token for admins and auditors, else its
        own."""
        return token_store.tokens(
            self.store, user=None if principal.sees_all_tokens else principal.name
        )

    def revoke(self, principal: Principal, token_id_: str, *, now: datetime) -> ApiToken | None:
        """Revoke a token of ``principal``'s own (any token, for an admin); None when there is
        no such token it may list (the two are the same answer: no probing).

        Raises:
            TokenGrantDenied: an auditor revoking somebody else's token (it lists them all,
                and changes nothing).
        """
        found = next((t for t in self.visible_to(principal) if t.token_id == token_id_), None)
        if found is None:
            return None
        if not may_revoke(principal, found):
            raise TokenGrantDenied("only an admin revokes somebody else's token")
        token_store.revoke_token(self.store, token_id_, by=principal.name, at=now).result()
        with self._lock:
            self._cache.clear()  # the revoked token is refused from the next request on
            self._forgotten += 1
        log.info("api token %s of %s revoked by %s", token_id_, found.user, principal.name)
        return next(
            t for t in token_store.tokens(self.store, user=found.user) if t.token_id == token_id_
        )

    def authenticate(self, secret: str, *, now: datetime, address: str) -> ApiToken | None:
        """The active token ``secret`` is, or None (malformed, unknown, expired, revoked).

        A remembered token in the last ``ahead_seconds`` of its ``cache_seconds`` is looked up
        again on a thread of its own; a use due to be recorded is queued to the store's writer,
        not waited for.

        Raises:
            SnapshotMiss: inside :func:`~hpcscope.service.snapshots.cache_only` (the event
                loop), unless the token is remembered (a store query is a worker's job).
        """
        if not is_well_formed(secret):
            return None
        digest = token_digest(secret)
        clock = self._clock()
        ahead = False
        with self._lock:
            cached = self._cache.get(digest)
            if cached is not None and cached[1] > clock:
                ahead = cached[1] - clock < self.ahead_seconds and digest not in self._looking_up
                if ahead:
                    self._looking_up.add(digest)
        if cached is not None and cached[1] > clock:
            found: ApiToken | None = cached[0]
            if ahead:
                threading.Thread(
                    target=self._look_up_ahead, args=(digest,), name="token-lookup", daemon=True
                ).start()
        elif caching_only():
            raise SnapshotMiss(("tokens.authenticate", digest))
        else:
            found = self._look_up(digest)
        if found is None or not found.is_active(now):
            return None
        with self._lock:
            last = self._touched.get(found.token_id)
            due = last is None or (now - last).total_seconds() >= TOUCH_EVERY_SECONDS
            if due:
                if len(self._touched) > 100_000:
                    self._touched.clear()
                self._touched[found.token_id] = now
        if due:  # queued to the writer thread (never waited for): no miss on the loop
            token_store.touch_token(self.store, found.token_id, at=now, address=address)
        return found

    def _look_up(self, digest: str) -> ApiToken | None:
        """The token of ``digest`` from the store, remembered for ``cache_seconds`` unless a
        revocation came in meanwhile (its store write may have landed after the read)."""
        with self._lock:
            forgotten = self._forgotten
        found = token_store.token_by_digest(self.store, digest)
        if found is not None:
            with self._lock:
                if self._forgotten == forgotten:
                    if len(self._cache) > 10_000:
                        self._cache.clear()
                    self._cache[digest] = (found, self._clock() + self.cache_seconds)
        return found

    def _look_up_ahead(self, digest: str) -> None:
        """:meth:`_look_up` behind the requests (a token gone from the store is forgotten)."""
        try:
            if self._look_up(digest) is None:
                with self._lock:
                    self._cache.pop(digest, None)
        except Exception:  # the entry runs out as before; the next request looks it up
            log.exception("looking up an api token again failed")
        finally:
            with self._lock:
                self._looking_up.discard(digest)


def may_revoke(principal: Principal, token: ApiToken) -> bool:
    """Its own user (even through a read-only token: revoking only takes rights away), or an
    admin who may change things."""
    return token.user == principal.name or (principal.is_admin and principal.may_change)


def token_principal(token: ApiToken, user: Principal) -> Principal:
    """The principal a request authenticated by ``token`` acts as: ``user``'s current rights,
    read-only unless the token is ``admin`` and the user still an admin."""
    writes = token.scope is TokenScope.ADMIN and user.role is Role.ADMIN
    return replace(user, read_only=not writes, via=f"token {token.token_id}")
