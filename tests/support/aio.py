"""Run a coroutine from a synchronous test, whatever the main thread is running.

Playwright's sync API (the session-scoped ``browser`` fixture) keeps an event loop running in
the main thread once a browser test has run; ``asyncio.run()`` refuses to start there. Running
the coroutine on a fresh loop in its own thread works in any test order.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)`` on a thread of its own; its exception is raised here."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="test-event-loop")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    value: T = outcome["value"]
    return value
