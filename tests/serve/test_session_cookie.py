"""The session signer that remembers verified cookies answers as itsdangerous's does.

Its own clock (``get_timestamp``) is the seam: a cookie signed at t is good until t + max_age,
remembered or not, and one with a wrong signature is refused each time it comes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from itsdangerous import BadSignature, SignatureExpired, TimestampSigner

from hpcscope.serve.session_cookie import RememberingSigner

SECRET = "test-secret"


class _Clocked(RememberingSigner):
    now = 1_800_000_000

    def get_timestamp(self) -> int:
        return self.now


class _ClockedPlain(TimestampSigner):
    now = 1_800_000_000

    def get_timestamp(self) -> int:
        return self.now


def test_a_cookie_expires_on_time_though_remembered() -> None:
    signer = _Clocked(SECRET)
    cookie = signer.sign(b"eyJ1c2VyIjogImFsaWNlIn0=")
    assert signer.unsign(cookie, max_age=60) == b"eyJ1c2VyIjogImFsaWNlIn0="
    signer.now += 60
    assert signer.unsign(cookie, max_age=60) == b"eyJ1c2VyIjogImFsaWNlIn0="
    signer.now += 1
    with pytest.raises(SignatureExpired, match="Signature age 61 > 60 seconds"):
        signer.unsign(cookie, max_age=60)
    signer.now -= 100
    with pytest.raises(SignatureExpired, match="< 0 seconds"):
        signer.unsign(cookie, max_age=60)
    assert signer.unsign(cookie) == b"eyJ1c2VyIjogImFsaWNlIn0="  # no age limit asked


def test_a_bad_signature_is_refused_every_time() -> None:
    signer = RememberingSigner(SECRET)
    forged = TimestampSigner("another-secret").sign(b"e30=")
    for _ in range(3):
        with pytest.raises(BadSignature):
            signer.unsign(forged, max_age=60)
    assert len(signer._verified) == 0


def test_the_oldest_cookies_are_forgotten_first() -> None:
    signer = RememberingSigner(SECRET, remembered=2)
    cookies = [signer.sign(f"v{i}".encode()) for i in range(3)]
    for cookie in cookies:
        signer.unsign(cookie, max_age=60)
    assert list(signer._verified) == cookies[1:]


@given(
    value=st.binary(max_size=40),
    signed_ago=st.integers(min_value=-5, max_value=100),
    max_age=st.one_of(st.none(), st.integers(min_value=0, max_value=90)),
    tamper=st.integers(min_value=-1, max_value=60),
)
def test_the_same_answer_as_itsdangerous(
    value: bytes, signed_ago: int, max_age: int | None, tamper: int
) -> None:
    """Same value or the same kind of error, asked twice (the second time remembered)."""
    plain, remembering = _ClockedPlain(SECRET), _Clocked(SECRET)
    plain.now = remembering.now = 1_800_000_000 - signed_ago
    cookie = bytearray(plain.sign(value))
    if 0 <= tamper < len(cookie):
        cookie[tamper] = (cookie[tamper] + 1) % 256
    plain.now = remembering.now = 1_800_000_000

    def outcome(signer: TimestampSigner) -> object:
        try:
            return signer.unsign(bytes(cookie), max_age=max_age)
        except BadSignature as exc:
            return (type(exc), str(exc))

    want = outcome(plain)
    assert outcome(remembering) == want
    assert outcome(remembering) == want
