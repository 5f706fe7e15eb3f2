"""API tokens (``api_tokens``, migration 10) and the identity Slurm gives a user name.

The table keeps a token's SHA-256, never the token. Lookups go by that digest (an index on a
value an attacker cannot steer: no timing to learn from). Revocation and expiry are columns,
so a revoked token stays listed (who revoked it, when) and its digest can never be reused.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime

import duckdb

from hpcscope.model.access import TokenScope
from hpcscope.model.tokens import ApiToken
from hpcscope.store.duck import Store

_COLUMNS = (
    'token_id, "user", scope, label, created_at, created_by, expires_at, revoked_at, '
    "revoked_by, last_used_at, last_used_address"
)


def _token(row: tuple[object, ...]) -> ApiToken:
    return ApiToken(
        token_id=str(row[0]),
        user=str(row[1]),
        scope=TokenScope(str(row[2])),
        label=str(row[3]),
        created_at=row[4],  # type: ignore[arg-type]
        created_by=str(row[5]),
        expires_at=row[6],  # type: ignore[arg-type]
        revoked_at=row[7],  # type: ignore[arg-type]
        revoked_by=None if row[8] is None else str(row[8]),
        last_used_at=row[9],  # type: ignore[arg-type]
        last_used_address=None if row[10] is None else str(row[10]),
    )


def insert_token(store: Store, token: ApiToken, *, secret_sha256: str) -> Future[None]:
    """Store a new token's record and digest."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            f"INSERT INTO api_tokens ({_COLUMNS}, secret_sha256) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)",
            [
                token.token_id,
                token.user,
                token.scope.value,
                token.label,
                token.created_at,
                token.created_by,
                token.expires_at,
                secret_sha256,
            ],
        )

    return store.submit_write(write)


def token_by_digest(store: Store, secret_sha256: str) -> ApiToken | None:
    """The token whose SHA-256 is ``secret_sha256``, revoked and expired ones included."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM api_tokens WHERE secret_sha256 = ?", [secret_sha256]
    ).to_pylist()
    return _token(tuple(rows[0].values())) if rows else None


def tokens(store: Store, *, user: str | None = None) -> list[ApiToken]:
    """Tokens of ``user`` (every user's when None), newest first."""
    where, params = ('WHERE "user" = ?', [user]) if user is not None else ("", [])
    rows = store.query(
        f"SELECT {_COLUMNS} FROM api_tokens {where} ORDER BY created_at DESC, token_id", params
    ).to_pylist()
    return [_token(tuple(row.values())) for row in rows]


def revoke_token(store: Store, token_id: str, *, by: str, at: datetime) -> Future[bool]:
    """Revoke one token (a second revocation keeps the first's who and when).

    Returns:
        A future with whether a token with that id exists.
    """

    def write(con: duckdb.DuckDBPyConnection) -> bool:
        con.execute(
            "UPDATE api_tokens SET revoked_at = ?, revoked_by = ? "
            "WHERE token_id = ? AND revoked_at IS NULL",
            [at, by, token_id],
        )
        found = con.execute("SELECT 1 FROM api_tokens WHERE token_id = ?", [token_id]).fetchall()
        return bool(found)

    return store.submit_write(write)


def touch_token(store: Store, token_id: str, *, at: datetime, address: str) -> Future[None]:
    """Record a token's use (the caller throttles this to once a minute per token)."""

    def write(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "UPDATE api_tokens SET last_used_at = ?, last_used_address = ? WHERE token_id = ?",
            [at, address, token_id],
        )

    return store.submit_write(write)


def known_to_slurm(store: Store, user: str) -> bool:
    """Whether Slurm's associations (``sacctmgr show assoc``) name ``user``."""
    rows = store.query(
        'SELECT 1 FROM account_memberships WHERE "user" = ? LIMIT 1', [user]
    ).to_pylist()
    return bool(rows)
