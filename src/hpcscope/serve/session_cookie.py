"""The session cookie's middleware, checking each distinct cookie's signature once.

Starlette's :class:`~starlette.middleware.sessions.SessionMiddleware` verifies the cookie's
HMAC on every request (``itsdangerous``: a key derivation, then the HMAC): under the API load
bench (``bench/api_load.py``) about a fifth of the CPU of a request answered from the read
snapshots, for the same few cookies again and again. :class:`SessionMiddleware` here is
Starlette's, with a signer that remembers the cookies whose signature it verified
(:class:`RememberingSigner`); the age limit is checked on every request as before, so a
cookie past ``max_age`` is refused on time, and a cookie that failed is checked again each
time it comes (it is not remembered).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Literal

from itsdangerous import SignatureExpired, TimestampSigner
from starlette.middleware import sessions
from starlette.types import ASGIApp

#: Distinct verified cookies remembered (least recently used out first): one per session.
REMEMBERED_COOKIES = 4096


class RememberingSigner(TimestampSigner):
    """A :class:`~itsdangerous.TimestampSigner` whose :meth:`unsign` remembers, per signed
    value, what a successful verification found (the value and its timestamp), and checks
    only the age again: the same answers and errors as the signer it extends."""

    def __init__(self, secret_key: str, *, remembered: int = REMEMBERED_COOKIES) -> None:
        super().__init__(secret_key)
        self._verified: OrderedDict[bytes, tuple[bytes, int]] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def unsign(
        self,
        signed_value: str | bytes,
        max_age: int | None = None,
        return_timestamp: bool = False,
    ) -> Any:
        if return_timestamp:  # not what the session middleware asks: the signer's own path
            return super().unsign(signed_value, max_age=max_age, return_timestamp=True)
        key = signed_value.encode("utf-8") if isinstance(signed_value, str) else signed_value
        with self._lock:
            known = self._verified.get(key)
            if known is not None:
                self._verified.move_to_end(key)
        if known is None:
            value, signed_at = super().unsign(key, return_timestamp=True)
            known = (value, int(signed_at.timestamp()))
            with self._lock:
                self._verified[key] = known
                while len(self._verified) > self._remembered:
                    self._verified.popitem(last=False)
        value, timestamp = known
        if max_age is not None:  # TimestampSigner.unsign's own age rule and messages
            age = self.get_timestamp() - timestamp
            if age > max_age:
                raise SignatureExpired(
                    f"Signature age {age} > {max_age} seconds",
                    payload=value,
                    date_signed=self.timestamp_to_datetime(timestamp),
                )
            if age < 0:
                raise SignatureExpired(
                    f"Signature age {age} < 0 seconds",
                    payload=value,
                    date_signed=self.timestamp_to_datetime(timestamp),
                )
        return value


class SessionMiddleware(sessions.SessionMiddleware):
    """Starlette's session middleware with a :class:`RememberingSigner` (module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        secret_key: str,
        session_cookie: str = "session",
        max_age: int | None = 14 * 24 * 60 * 60,
        path: str = "/",
        same_site: Literal["lax", "strict", "none"] = "lax",
        https_only: bool = False,
        domain: str | None = None,
        partitioned: bool = False,
    ) -> None:
        super().__init__(
            app,
            secret_key,
            session_cookie=session_cookie,
            max_age=max_age,
            path=path,
            same_site=same_site,
            https_only=https_only,
            domain=domain,
            partitioned=partitioned,
        )
        self.signer = RememberingSigner(secret_key)
