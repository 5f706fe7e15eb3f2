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
    """

    def __init__(self, store: Store, *, max_days: float = 365.0) -> None:
        self.store = store
        self.max_days = max_days
        self._touched: dict[str, datetime] = {}
        self._cache: dict[str, tuple[ApiToken, float]] = {}
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
        log.info("api token %s of %s revoked by %s", token_id_, found.user, principal.name)
        return next(
            t for t in token_store.tokens(self.store, user=found.user) if t.token_id == token_id_
        )

    def authenticate(self, secret: str, *, now: datetime, address: str) -> ApiToken | None:
        """The active token ``secret`` is, or None (malformed, unknown, expired, revoked).

        Raises:
            SnapshotMiss: inside :func:`~hpcscope.service.snapshots.cache_only` (the event
                loop), unless the token is remembered and its use was recorded recently (a store
                query or write is a worker's job).
        """
        if not is_well_formed(secret):
            return None
        digest = token_digest(secret)
        clock = time.monotonic()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[1] > clock:
            found: ApiToken | None = cached[0]
        elif caching_only():
            raise SnapshotMiss(("tokens.authenticate", digest))
        else:
            found = token_store.token_by_digest(self.store, digest)
            if found is not None:
                with self._lock:
                    if len(self._cache) > 10_000:
                        self._cache.clear()
                    self._cache[digest] = (found, clock + CACHE_SECONDS)
        if found is None or not found.is_active(now):
            return None
        with self._lock:
            last = self._touched.get(found.token_id)
            due = last is None or (now - last).total_seconds() >= TOUCH_EVERY_SECONDS
            if due and caching_only():
                raise SnapshotMiss(("tokens.touch", found.token_id))
            if due:
                if len(self._touched) > 100_000:
                    self._touched.clear()
                self._touched[found.token_id] = now
        if due:
            token_store.touch_token(self.store, found.token_id, at=now, address=address)
        return found


def may_revoke(principal: Principal, token: ApiToken) -> bool:
    """Its own user (even through a read-only token: revoking only takes rights away), or an
    admin who may change things."""
    return token.user == principal.name or (principal.is_admin and principal.may_change)


def token_principal(token: ApiToken, user: Principal) -> Principal:
    """The principal a request authenticated by ``token`` acts as: ``user``'s current rights,
    read-only unless the token is ``admin`` and the user still an admin."""
    writes = token.scope is TokenScope.ADMIN and user.role is Role.ADMIN
    return replace(user, read_only=not writes, via=f"token {token.token_id}")
