"""API tokens: their format, and the record kept of each (never the secret itself).

A token is ``hps_`` followed by 40 random base62 characters (238 bits) and a 6-character base62
CRC-32 of those 40, e.g. ``hps_4Xq...Zk1Ab9``. The fixed prefix lets secret scanners (GitHub
push protection, gitleaks, trufflehog) find a leaked token with one pattern,
``hps_[0-9A-Za-z]{46}``, and the checksum lets them (and the server) reject a mistyped or
made-up string without a lookup. The first 8 random characters are the token's public id: lists
and audit lines show ``hps_4Xq7abcd…``, never more.

The server stores only the SHA-256 of the whole token (see ``docs/identity.md`` for why a
fast hash is right for a 238-bit random secret, where a password needs scrypt).
"""

from __future__ import annotations

import hashlib
import secrets
import zlib
from dataclasses import dataclass
from datetime import datetime

from hpcscope.model.access import TokenScope

PREFIX = "hps_"
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_RANDOM_CHARS = 40
_CHECKSUM_CHARS = 6
_ID_CHARS = 8
#: Characters of a whole token.
TOKEN_CHARS = len(PREFIX) + _RANDOM_CHARS + _CHECKSUM_CHARS
#: The pattern a secret scanner looks for.
SCANNER_PATTERN = r"hps_[0-9A-Za-z]{46}"


def _base62(value: int, width: int) -> str:
    out = []
    for _ in range(width):
        value, digit = divmod(value, 62)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), _CHECKSUM_CHARS)


def new_token() -> str:
    """A fresh token from the operating system's CSPRNG (:mod:`secrets`)."""
    body = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_CHARS))
    return PREFIX + body + _checksum(body)


def is_well_formed(token: str) -> bool:
    """Whether ``token`` has the prefix, the length, the alphabet and a matching checksum."""
    if len(token) != TOKEN_CHARS or not token.startswith(PREFIX):
        return False
    body = token[len(PREFIX) : len(PREFIX) + _RANDOM_CHARS]
    if any(ch not in _ALPHABET for ch in token[len(PREFIX) :]):
        return False
    return secrets.compare_digest(token[-_CHECKSUM_CHARS:], _checksum(body))


def token_id(token: str) -> str:
    """The public id of a token: its first 8 random characters."""
    return token[len(PREFIX) : len(PREFIX) + _ID_CHARS]


def token_digest(token: str) -> str:
    """The SHA-256 (hex) the store keeps instead of the token."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiToken:
    """What the server knows of one token (the secret itself is shown once, at creation).

    Attributes:
        token_id: the public id (8 characters; ``hps_<id>…`` in lists).
        user: whose rights it carries (the user's role now, not at creation).
        scope: ``read`` or ``admin``.
        label: what the owner said it is for.
        created_at: naive UTC.
        created_by: who created it (the user, or an admin for them).
        expires_at: naive UTC; refused from then on.
        revoked_at: naive UTC, None while not revoked.
        revoked_by: who revoked it.
        last_used_at: naive UTC of the last request it authenticated (to the minute).
        last_used_address: the client address of that request.
    """

    token_id: str
    user: str
    scope: TokenScope
    label: str
    created_at: datetime
    created_by: str
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    last_used_at: datetime | None = None
    last_used_address: str | None = None

    def is_active(self, now: datetime) -> bool:
        """Not revoked, not expired at ``now`` (naive UTC)."""
        return self.revoked_at is None and now < self.expires_at

    def status(self, now: datetime) -> str:
        """``active``, ``expired`` or ``revoked``."""
        if self.revoked_at is not None:
            return "revoked"
        return "active" if now < self.expires_at else "expired"
