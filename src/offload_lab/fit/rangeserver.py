"""A small static file server for loopback benchmarks and tests of the remote checkpoint reader.

Python's own ``http.server`` (3.11) ignores ``Range``; this one honours a single ``bytes=`` range (``a-b``, ``a-``,
``-n``) with 206 and ``Content-Range``, and can be told to behave like the servers the reader must survive: ignore
``Range`` (answer 200 with the whole body), fail the first requests with 503, or add response headers (Hugging Face's
``X-Repo-Commit``). It counts requests and body bytes sent, so a test can check that no weights were transferred.

It binds 127.0.0.1 only and serves files under one root; paths that leave the root are refused.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

CHUNK = 64 * 1024


@dataclass
class ServerBehaviour:
    honour_range: bool = True
    fail_first: int = 0  # per path: the first N requests answer 503
    extra_headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RequestRecord:
    path: str
    range: str | None
    status: int
    body_bytes: int
    authorization: str | None  # kept in memory only, for tests that check where a token went


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root: Path, behaviour: ServerBehaviour):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root.resolve()
        self.behaviour = behaviour
        self.records: list[RequestRecord] = []
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence the default stderr log
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        rng = self.headers.get("Range")
        with self.server.lock:
            n = self.server.seen.get(path, 0)
            self.server.seen[path] = n + 1
        if n < self.server.behaviour.fail_first:
            return self._status(HTTPStatus.SERVICE_UNAVAILABLE, path, rng)
        target = (self.server.root / path.lstrip("/")).resolve()
        if not target.is_relative_to(self.server.root) or not target.is_file():
            return self._status(HTTPStatus.NOT_FOUND, path, rng)
        size = target.stat().st_size
        start, end, status = 0, size - 1, HTTPStatus.OK
        if rng and self.server.behaviour.honour_range:
            parsed = _parse_range(rng, size)
            if parsed is None:
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return self._record(path, rng, 416, 0)
            start, end = parsed
            status = HTTPStatus.PARTIAL_CONTENT
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes" if self.server.behaviour.honour_range else "none")
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        for k, v in self.server.behaviour.extra_headers.items():
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        if body:
            sent = self._copy(target, start, length)
        self._record(path, rng, int(status), sent)

    def _copy(self, target: Path, start: int, length: int) -> int:
        sent = 0
        try:
            with open(target, "rb") as f:
                f.seek(start)
                while sent < length:
                    chunk = f.read(min(CHUNK, length - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            # The client hung up (the reader aborting an unwanted full body): stop sending.
            self.close_connection = True
        return sent

    def _status(self, status: HTTPStatus, path: str, rng: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self._record(path, rng, int(status), 0)

    def _record(self, path: str, rng: str | None, status: int, sent: int) -> None:
        with self.server.lock:
            self.server.records.append(RequestRecord(path, rng, status, sent, self.headers.get("Authorization")))


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", value)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # suffix: the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else None
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size or end < start:
        return None
    return start, min(end, size - 1)


@dataclass
class RunningServer:
    url: str
    server: _Server

    @property
    def records(self) -> list[RequestRecord]:
        with self.server.lock:
            return list(self.server.records)

    def body_bytes(self) -> int:
        return sum(r.body_bytes for r in self.records)


@contextlib.contextmanager
def serve_directory(root: Path | str, behaviour: ServerBehaviour | None = None) -> Iterator[RunningServer]:
    """Serve ``root`` on 127.0.0.1 at a free port in a background thread; stopped when the block ends."""
    server = _Server(Path(root), behaviour or ServerBehaviour())
    thread = threading.Thread(target=server.serve_forever, name="offload-lab-rangeserver", daemon=True)
    thread.start()
    try:
        yield RunningServer(url=f"http://127.0.0.1:{server.server_address[1]}", server=server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    """``python -m offload_lab.fit.rangeserver DIR``: serve DIR, print the URL on one line, stop when stdin closes.

    A separate process keeps the server's threads off the client's interpreter lock, so a benchmark times the
    reader, not two programs sharing one Python.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m offload_lab.fit.rangeserver", description=main.__doc__)
    ap.add_argument("root", help="directory to serve on 127.0.0.1")
    ap.add_argument("--ignore-range", action="store_true", help="answer 200 with the whole file to every request")
    args = ap.parse_args(argv)
    with serve_directory(args.root, ServerBehaviour(honour_range=not args.ignore_range)) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # returns when the parent closes the pipe or exits
    return 0


@contextlib.contextmanager
def serve_directory_process(root: Path | str, honour_range: bool = True) -> Iterator[str]:
    """Like :func:`serve_directory`, in a child Python process; yields the base URL."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "offload_lab.fit.rangeserver", str(root)] + ([] if honour_range else ["--ignore-range"])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            from offload_lab.core.errors import ServerError

            raise ServerError(f"the loopback range server for {root} did not start (exit code {proc.poll()}, first "
                              f"line {url[:80]!r}); see its error output above")
        yield url
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


__all__ = ["ServerBehaviour", "RequestRecord", "RunningServer", "serve_directory", "serve_directory_process"]


if __name__ == "__main__":
    raise SystemExit(main())
