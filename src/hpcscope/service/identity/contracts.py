"""Documents of the API tokens: ``GET/POST /api/tokens`` and ``hpcscope token --json``."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from hpcscope.model.timeutil import iso_z
from hpcscope.model.tokens import PREFIX, ApiToken
from hpcscope.service.contract import Contract, UtcText


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else iso_z(moment)


class TokenDocument(Contract):
    """One token as its user or an admin sees it: never the secret, never its hash."""

    token_id: str = Field(description="public id: the 8 characters after hps_")
    hint: str = Field(description="how the token begins (hps_<id>...), to recognise it")
    user: str
    scope: str = Field(description="read or admin")
    label: str
    status: str = Field(description="active, expired or revoked")
    created_at: UtcText
    created_by: str
    expires_at: UtcText
    revoked_at: UtcText | None
    revoked_by: str | None
    last_used_at: UtcText | None = Field(description="last request it authenticated (±1 min)")
    last_used_address: str | None

    @classmethod
    def of(cls, token: ApiToken, *, now: datetime) -> TokenDocument:
        return cls(
            token_id=token.token_id,
            hint=f"{PREFIX}{token.token_id}…",
            user=token.user,
            scope=token.scope.value,
            label=token.label,
            status=token.status(now),
            created_at=iso_z(token.created_at),
            created_by=token.created_by,
            expires_at=iso_z(token.expires_at),
            revoked_at=_iso(token.revoked_at),
            revoked_by=token.revoked_by,
            last_used_at=_iso(token.last_used_at),
            last_used_address=token.last_used_address,
        )


class TokenList(Contract):
    """The tokens the caller may list (its own; every one for admins and auditors)."""

    count: int
    tokens: list[TokenDocument]


class CreatedTokenDocument(Contract):
    """A new token. ``secret`` is shown this once: the server keeps only its SHA-256."""

    secret: str = Field(description="the token (hps_...): send as Authorization: Bearer")
    token: TokenDocument
