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
