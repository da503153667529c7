"""A whole-call deadline around a blocking HTTP call.

httpx's timeouts bound each socket operation, not the call: a server that trickles its status line or headers one
byte a second resets the read timeout forever (a body is checked chunk by chunk by its readers, headers cannot be).
So the call runs on a daemon thread and the caller stops waiting at the deadline; the abandoned thread ends when the
server gives up, or with the process (a daemon thread never holds the program open).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def within(seconds: float, fn: Callable[[], T], late: Callable[[], BaseException]) -> T:
    """``fn()``, or ``late()`` raised when it has not returned after ``seconds`` (SIGINT still interrupts the wait)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller as it is
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="offload-lab-deadline").start()
    if not done.wait(seconds):
        raise late()
    if "error" in box:
        raise box["error"]
    return box["value"]
