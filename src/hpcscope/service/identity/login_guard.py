"""Throttling of failed logins, per user name and per client address, with an audit trail.

A password guesser is slowed on two keys at once: the user name it tries (one account, many
addresses) and the address it comes from (many accounts, one address). Each key may fail
``max_failures`` times within ``window_seconds``; the failure that reaches the limit locks the
key for ``window_seconds``, and each further lockout of the same key doubles that, up to
``max_lockout_seconds``. A locked key is refused before any password is checked (no scrypt work
to spend, nothing learnt). A success clears the user name's failures, never the address's.

Trade-off: locking a user name lets anyone deny that user the login form for a while; the
lockout is short, audited, and HTTP Basic from a trusted script is throttled the same way.

The audit trail is a bounded in-memory log (:attr:`LoginGuard.audit`, newest last) plus one log
line per record: failures and lockouts are rare events a site ships with its logs; a store
table would add a migration and a write path for what the log already carries.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

log = logging.getLogger(__name__)

#: Keys tracked at once; the least recently failed are forgotten beyond this (bounded memory
#: under a spray of made-up names).
MAX_TRACKED_KEYS = 50_000
#: Audit records kept in memory.
AUDIT_RECORDS = 1_000
#: Characters of a tried user name kept (a key, an audit record): names are attacker-chosen.
MAX_NAME_CHARS = 256

AuditKind = Literal["failure", "lockout", "refused"]


@dataclass(frozen=True, slots=True)
class LoginAuditRecord:
    """One failed or refused login, or one lockout.

    Attributes:
        at_seconds: UNIX time of the event.
        kind: ``failure`` (wrong name or password), ``lockout`` (a key reached the limit),
            ``refused`` (a try while locked, answered 429).
        user: the user name tried (as typed: it may not exist).
        address: the client address.
        key: for a lockout, which key locked: ``user`` or ``address``; else empty.
        lockout_seconds: for a lockout, how long.
    """

    at_seconds: float
    kind: AuditKind
    user: str
    address: str
    key: str = ""
    lockout_seconds: float = 0.0


@dataclass(slots=True)
class _KeyState:
    failures: deque[float]
    locked_until: float = 0.0
    lockouts: int = 0
    last_failure: float = field(default=0.0)


class LoginGuard:
    """Counts failed logins and answers how long a user name or address must wait.

    Args:
        max_failures: failures per key within ``window_seconds`` that lock it.
        window_seconds: the sliding window, and the first lockout's length.
        max_lockout_seconds: cap of the doubling lockout.
        clock: seconds (UNIX time); tests pass a fake.
    """

    def __init__(
        self,
        *,
        max_failures: int = 10,
        window_seconds: float = 60.0,
        max_lockout_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_failures < 1:
            raise ValueError(f"max_failures must be at least 1, not {max_failures}")
        self.max_failures = max_failures
        self.window_seconds = window_seconds
        self.max_lockout_seconds = max_lockout_seconds
        self._clock = clock
        self._keys: OrderedDict[tuple[str, str], _KeyState] = OrderedDict()
        self.audit: deque[LoginAuditRecord] = deque(maxlen=AUDIT_RECORDS)

    def retry_after_seconds(self, user: str, address: str) -> float:
        """Seconds until ``user`` from ``address`` may try again; 0 when they may now.

        A positive answer is audited as ``refused``: the caller answers 429 without checking
        the password.
        """
        now, user = self._clock(), user[:MAX_NAME_CHARS]
        wait = max(
            self._locked_for(("user", user), now), self._locked_for(("address", address), now)
        )
        if wait > 0:
            self._record(LoginAuditRecord(now, "refused", user, address))
        return wait

    def record_failure(self, user: str, address: str) -> None:
        """A wrong user name or password: count it on both keys, lock those at the limit."""
        now, user = self._clock(), user[:MAX_NAME_CHARS]
        self._record(LoginAuditRecord(now, "failure", user, address))
        for kind, value in (("user", user), ("address", address)):
            state = self._state((kind, value), now)
            state.failures.append(now)
            state.last_failure = now
            while state.failures and state.failures[0] <= now - self.window_seconds:
                state.failures.popleft()
            if len(state.failures) >= self.max_failures:
                lockout = min(self.window_seconds * 2**state.lockouts, self.max_lockout_seconds)
                state.lockouts += 1
                state.locked_until = now + lockout
                state.failures.clear()
                self._record(LoginAuditRecord(now, "lockout", user, address, kind, lockout))

    def record_success(self, user: str) -> None:
        """The right password: the user name's failures and lockout history are cleared."""
        self._keys.pop(("user", user[:MAX_NAME_CHARS]), None)

    def _locked_for(self, key: tuple[str, str], now: float) -> float:
        state = self._keys.get(key)
        if state is None:
            return 0.0
        if state.lockouts and now - state.last_failure > self.max_lockout_seconds * 2:
            # quiet for long enough: the next lockout starts short again
            del self._keys[key]
            return 0.0
        return max(0.0, state.locked_until - now)

    def _state(self, key: tuple[str, str], now: float) -> _KeyState:
        state = self._keys.get(key)
        if state is None:
            state = _KeyState(failures=deque(maxlen=self.max_failures))
            self._keys[key] = state
            while len(self._keys) > MAX_TRACKED_KEYS:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        return state

    def _record(self, record: LoginAuditRecord) -> None:
        self.audit.append(record)
        # refused tries are not bounded by the throttle: kept in the audit log, logged at DEBUG
        level = {"failure": logging.INFO, "lockout": logging.WARNING}.get(
            record.kind, logging.DEBUG
        )
        log.log(
            level,
            "login %s: user=%r address=%s%s",
            record.kind,
            record.user,
            record.address,
            f" key={record.key} for {record.lockout_seconds:.0f} s" if record.key else "",
        )
