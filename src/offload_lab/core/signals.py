"""SIGINT, SIGTERM and SIGHUP end long work the same way: as an interrupt that names the signal.

Python turns SIGINT into KeyboardInterrupt; SIGTERM (``kill``, a pod's shutdown, a CI timeout) and SIGHUP (a closed
terminal or ssh session) end the process without unwinding anything, so runs stay ``running`` and ledger sessions
open. Inside :func:`stopping_on_signals` all three raise :class:`Stopped`, a KeyboardInterrupt, so every block that
already finishes a run as ``stopped`` on an interrupt does the same for them, with the signal as the reason.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import threading
from typing import Any, Iterator

from offload_lab.core.errors import InputError

# A write that failed for want of space (or quota): the place given cannot take the output, which is the user's to
# change (free space, another --data-dir or --out), not an internal error.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFullError(InputError):
    """No space left where a command writes (exit 2, naming the file)."""


def disk_full(e: OSError) -> DiskFullError:
    where = e.filename or "its output"
    return DiskFullError(f"no space left on the device writing {where} ({e.strerror or errno.errorcode.get(e.errno)}); "
                         "free some space or write elsewhere (--data-dir, --out). What was written before is kept; "
                         "a run that was being written is marked failed")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The work was ended by a signal; ``str()`` says which."""


def reason_of(e: BaseException) -> str:
    """Words for why a block ended early: the signal's, or the interrupt's."""
    text = str(e)
    if text:
        return text
    return "interrupted (SIGINT)" if isinstance(e, KeyboardInterrupt) else type(e).__name__


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Raise :class:`Stopped` in the main thread on SIGINT, SIGTERM or SIGHUP; restore the handlers afterwards.

    Outside the main thread (where Python allows no handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        raise Stopped(f"stopped by {name}")

    previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield
    except OSError as e:
        # Every command runs inside this block (cli.main): a full disk anywhere becomes one clear error.
        if e.errno in DISK_FULL:
            raise disk_full(e) from None
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
