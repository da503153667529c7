"""Processes and ports: free loopback ports, and stopping a process group (a server and every child it made)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from typing import Any


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_group(proc: subprocess.Popen, timeout_s: float) -> dict[str, Any]:
    """Stop a process started with ``start_new_session=True`` and every child it made."""
    pgid = proc.pid  # session leader: its pid is the group id
    sent = None
    if proc.poll() is None or process_group_alive(pgid):
        sent = "SIGTERM"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not process_group_alive(pgid):
                break
            time.sleep(0.2)
        else:
            sent = "SIGKILL"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    # Children that outlive the leader still hold the group id; give them the same treatment.
    if process_group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        sent = "SIGKILL"
        for _ in range(50):
            if not process_group_alive(pgid):
                break
            time.sleep(0.1)
    return {"signal": sent, "returncode": proc.returncode, "group_left": process_group_alive(pgid)}


# --- who is running a run ----------------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int] | None:
    """State and start time (clock ticks since boot, /proc/PID/stat fields 3 and 22) of a process. With the pid, the
    start time names one process, so a pid reused by another process is not taken for the first."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def _start_ticks(pid: int) -> int | None:
    st = _stat(pid)
    return st[1] if st else None


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """What a manifest records about the process writing a run, to tell later whether that process still lives."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": socket.gethostname(), "start_ticks": _start_ticks(pid)}


def process_gone(identity: dict[str, Any] | None) -> bool | None:
    """True when the recorded process no longer runs, False when it does, None when this host cannot tell (another
    host, or nothing recorded)."""
    if not isinstance(identity, dict) or identity.get("host") != socket.gethostname():
        return None
    pid = identity.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    st = _stat(pid)
    if st is None:
        return None
    if st[0] in ("Z", "X"):  # dead, not yet reaped by its parent
        return True
    recorded = identity.get("start_ticks")
    return recorded is not None and st[1] != recorded
