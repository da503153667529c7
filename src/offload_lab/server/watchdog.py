"""A server never outlives the process that started it.

vLLM runs in a session of its own (so that Ctrl-C at a terminal reaches only offload-lab, which then stops it in
order). That also puts it out of reach when offload-lab dies without stopping it: SIGKILL, an OOM kill, a crash. Two
guards, both set up by :func:`offload_lab.server.stack.boot`:

1. the server's first process asks the kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, set in
   the child between fork and exec by :func:`child_setup`);
2. a watchdog process (``python -m offload_lab.server.watchdog``, this module) waits for the parent to go; then it
   stops the server's whole process group (SIGTERM, then SIGKILL after the stack's stop timeout) and marks the boot
   run ``stopped`` with the reason, since the parent can no longer do it.

Guard 1 costs nothing and needs no Python; guard 2 covers vLLM's own children (the engine core processes, which the
parent-death signal of the first process does not reach) and an API server that ignores SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from offload_lab.core.procs import process_group_alive

PR_SET_PDEATHSIG = 1
POLL_S = 0.25


def child_setup(parent_pid: int, cpus: set[int] | None = None) -> Callable[[], None]:
    """The ``preexec_fn`` of the server: parent-death signal, then CPU affinity. Runs in the child before exec.

    The kernel sends the signal when the *thread* that forked the child ends, so it is only asked for when the
    server is started from the main thread (which lives as long as the process); from another thread the watchdog
    alone guards it."""
    prctl = None
    if threading.current_thread() is threading.main_thread():
        # Loaded here, in the parent: between fork and exec only async-signal-safe work is wise (no dlopen).
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will ever come.
        if os.getppid() != parent_pid:
            os._exit(1)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return setup


def start_watchdog(pgid: int, run_dir: Path, stop_timeout_s: float) -> subprocess.Popen:
    """Start the watchdog of the server whose process group is ``pgid``, for this process as the parent."""
    return subprocess.Popen(
        [sys.executable, "-m", "offload_lab.server.watchdog", "--parent", str(os.getpid()), "--pgid", str(pgid),
         "--run", str(run_dir), "--stop-timeout", str(stop_timeout_s)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # Its own session: the Ctrl-C that reaches offload-lab's group must not stop the watchdog first.
        start_new_session=True, close_fds=True,
    )


def _stop_group(pgid: int, timeout_s: float) -> str | None:
    sent = None
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        if not process_group_alive(pgid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        sent = sig.name
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and process_group_alive(pgid):
            time.sleep(0.1)
    return sent


def _mark_stopped(run_dir: Path, parent: int, sent: str | None) -> None:
    from offload_lab.core import runs
    from offload_lab.core.inputs import read_json

    try:
        run = runs.attach_run(run_dir)
    except Exception:  # noqa: BLE001 (a damaged run must not keep the watchdog from exiting)
        return
    if run.manifest.get("outcome") != "running" and (run.path / "boot.json").is_file():
        return
    reason = (f"offload-lab (pid {parent}) died without stopping its server; the watchdog stopped the server's "
              f"process group ({sent or 'already gone'})")
    boot = {}
    with contextlib.suppress(Exception):
        boot = read_json(run.path / "boot.json", "boot record", expect=dict) if (
            run.path / "boot.json").is_file() else {}
    boot["stopped"] = {"reason": reason, "by": "watchdog", "signal": sent, "at": runs.utc_now()}
    run.write_json("boot.json", boot)
    if run.manifest.get("outcome") == "running":
        run.finish("stopped", error=reason, stop_reason=reason)


def watch(parent: int, pgid: int, run_dir: Path, stop_timeout_s: float) -> int:
    """Wait until the parent is gone or the server's group is; in the first case stop the group and mark the run."""
    while True:
        if not process_group_alive(pgid):
            return 0  # stopped the normal way
        if os.getppid() != parent:
            break
        time.sleep(POLL_S)
    sent = _stop_group(pgid, stop_timeout_s)
    _mark_stopped(run_dir, parent, sent)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="offload-lab-watchdog", description=__doc__.split("\n\n")[0])
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--pgid", type=int, required=True)
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--stop-timeout", type=float, default=30.0)
    a = ap.parse_args(argv)
    # The terminal's signals are not for us: only the parent's death ends the watch.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return watch(a.parent, a.pgid, a.run, a.stop_timeout)


if __name__ == "__main__":
    sys.exit(main())
