"""Finished requests reach the events log as they finish, without parsing on the loop that stamps the others.

A level keeps raw reads and parses them at its end (:mod:`offload_lab.load.share`: parsing on the timing loop
delayed other streams' stamps). Kept only in memory, a level's finished requests died with the process: SIGKILL
mid-level lost them. So each finished request's raw record is pickled and written, as it ends, to a pipe read by a
journal writer process, which parses it exactly as the level's end does and appends the event to the run's events
log (append-only, one flushed line per event, a fresh line after a torn one). The loop pays one ``pickle`` and one
``write`` to a pipe per request (measured in docs/load-generator.md); a pipe's bytes belong to the kernel, so a
SIGKILL of the load generator still lets the writer read them, append them and exit at end of file.

One pipe per share (a worker process writes whole messages only into its own), one writer per level. The writer
ignores SIGINT and SIGTERM: a stopped level's finished requests are written by it, then it ends when every pipe
closes. Whatever it did not write (it died, or never started) the coordinator writes at the level's end, by request id.
"""

from __future__ import annotations

import pickle
import signal
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable

import orjson

from offload_lab.core import redact
from offload_lab.core.eventlog import EventLog

READY_TIMEOUT_S = 60.0  # the writer imports the load client before it can parse (a second or two on a busy host)
CLOSE_TIMEOUT_S = 60.0  # a level's last requests parsed and appended after the pipes close
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe: a long stream's reads fit without a wait


def send(conn: Connection | None, item: tuple[Any, ...]) -> None:
    """On the timing loop: hand one finished request to the writer (a pickle and a pipe write, no parsing). A writer
    that went away costs nothing more: the coordinator writes what it missed at the level's end."""
    if conn is None or conn.closed:
        return
    try:
        conn.send_bytes(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
    except (OSError, ValueError):
        conn.close()


def _grow(conn: Connection) -> None:
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (OSError, ImportError, ValueError):
        pass  # a smaller pipe only means a long stream's write may wait for the writer to read


def _writer_main(readers: list[Connection], ready: Connection, path: str, secrets: list[str],
                 parse: Callable[[Any], dict[str, Any]]) -> None:
    # ``parse`` is the level's own parse (``share.journal_event``), handed in by the coordinator, so that this module
    # stays below ``share``, which sends to it; unpickling it here imports ``share`` before "ready".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for s in secrets:
        redact.add_secret(s)
    with EventLog(Path(path)) as log:
        ready.send_bytes(b"ready")
        ready.close()
        open_ = list(readers)
        while open_:
            for conn in wait(open_):
                try:
                    item = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    open_.remove(conn)
                    continue
                log.append(parse(item))


class Journal:
    """The coordinator's side: the writer process and one pipe per share."""

    def __init__(self, path: Path, shares: int, ctx: Any, parse: Callable[[Any], dict[str, Any]]):
        pairs = [ctx.Pipe(duplex=False) for _ in range(shares)]
        self.senders: list[Connection] = [w for _, w in pairs]
        for w in self.senders:
            _grow(w)
        ready_r, ready_w = ctx.Pipe(duplex=False)
        self.path = Path(path)
        self._start = self.path.stat().st_size if self.path.exists() else 0
        self.proc = ctx.Process(target=_writer_main, args=([r for r, _ in pairs], ready_w, str(path),
                                                            redact.known_secrets(), parse), daemon=False)
        self.proc.start()
        for r, _ in pairs:
            r.close()
        ready_w.close()
        self._ready = ready_r

    @classmethod
    def start(cls, path: Path, shares: int, ctx: Any, parse: Callable[[Any], dict[str, Any]]) -> "Journal | None":
        """A writer for this level, or None where no process can be started (a script without a main guard, a
        process limit): the level then writes its requests at its end, as before."""
        try:
            return cls(path, shares, ctx, parse)
        except (OSError, RuntimeError, ValueError):
            return None

    def wait_ready(self) -> bool:
        """Before the level's start: the writer's imports must not compete with the first requests' stamps."""
        try:
            ok = self._ready.poll(READY_TIMEOUT_S) and self._ready.recv_bytes() == b"ready"
        except (EOFError, OSError):
            ok = False
        self._ready.close()
        if not ok:
            self.close_senders()
        return bool(ok)

    def close_senders(self) -> None:
        for w in self.senders:
            w.close()

    def finish(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Close the pipes, let the writer append what it holds, and return the events it did not write (it died,
        never started, or a pipe broke): what this level appended to the log is read back and compared by request id."""
        self.close_senders()
        self.proc.join(CLOSE_TIMEOUT_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        written = {e.get("request_id") for e in _appended(self.path, self._start) if e.get("kind") == "request"}
        return [e for e in events if e.get("request_id") not in written]


def _appended(path: Path, start: int) -> list[dict[str, Any]]:
    """The events appended to ``path`` since it was ``start`` bytes long (a torn line skipped)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            tail = f.read()
    except OSError:
        return []
    out = []
    for line in tail.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a torn line, or one cut at ``start``
        if isinstance(event, dict):
            out.append(event)
    return out
