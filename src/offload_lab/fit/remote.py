"""Safetensors headers over HTTP: range requests to a URL or to ``hf://owner/name@revision``, never the weights.

The first request asks for ``bytes=0-(first_read-1)`` (the 8-byte length and, most of the time, the whole header), a
second one the rest of the header when it is longer. Shards are read concurrently, each with retries on connection
errors, 429 and 5xx. A server that ignores ``Range`` answers 200 with the whole body: the reader stops reading once it
holds the header bytes, closes the connection and raises :class:`RangeNotSupportedError` -- it never downloads
weights. ``HF_TOKEN`` (from the environment only) is sent to the Hugging Face endpoint and to no other host, and is
never stored in a record, a log or an error message. ``hf://`` sources are resolved to file URLs with
``huggingface_hub.hf_hub_url`` (no API call); the commit the server actually served (``X-Repo-Commit``) is recorded.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from offload_lab.core.errors import InputError, ServerError
from offload_lab.core.redact import add_url_secrets, redact_url
from offload_lab.fit.headers import (CONFIG_NAME, INDEX_NAME, SINGLE_NAME, Checkpoint, Shard, header_length,
                                         index_files, check_index, parse_header)
from offload_lab.load.deadline import within

DEFAULT_FIRST_READ = 64 * 1024
# Deadlines. A header is at most a few MiB: on any link that serves checkpoints one request takes seconds, so 30 s
# without a byte (connect or read) is a dead server, and 120 s for one whole request is a server trickling bytes to
# keep the connection open (which per-read timeouts never catch). An index or config.json above 16 MiB is not one.
READ_TIMEOUT_S = 30.0
REQUEST_DEADLINE_S = 120.0
MAX_JSON_BYTES = 16 * 1024 * 1024
# Hugging Face answers a file URL with a redirect to its CDN; a few hops at most.
MAX_REDIRECTS = 5
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
HF_TOKEN_ENV = "HF_TOKEN"


class RemoteError(ServerError):
    """The server holding the checkpoint answered wrongly (status, ranges, bytes, JSON, a header that is not one) or
    too slowly: server trouble (exit 3), never the user's input. The message names the URL and what was wrong."""


class RangeNotSupportedError(RemoteError):
    """The server answered a range request with the whole file: reading on would download the weights."""


class AccessError(InputError):
    """The file named is not there (404) or needs a token (401, 403): the user's to fix (exit 2)."""


class FetchError(RemoteError):
    """A remote file could not be read, after retries where retrying made sense."""



@dataclass(frozen=True)
class HFSource:
    repo_id: str
    revision: str
    subfolder: str | None = None

    @property
    def pinned(self) -> bool:
        return bool(re.fullmatch(r"[0-9a-f]{40}", self.revision))


def parse_hf_source(source: str) -> HFSource:
    """``hf://owner/name@revision[/subfolder]`` -> its parts. The revision is required: an audit names what it read."""
    m = re.fullmatch(r"hf://([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([^/]+))?(?:/(.+))?", source)
    if not m:
        raise InputError(f"{source!r} is not hf://owner/name@revision[/subfolder]")
    repo_id, revision, subfolder = m.groups()
    if not revision:
        raise InputError(
            f"{source}: name a revision, e.g. hf://{repo_id}@<40-hex commit>; a branch name moves, so an audit of "
            "it cannot be reproduced"
        )
    return HFSource(repo_id=repo_id, revision=revision, subfolder=subfolder.strip("/") if subfolder else None)


def hf_file_url(src: HFSource, filename: str, endpoint: str | None = None) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(src.repo_id, filename, subfolder=src.subfolder, revision=src.revision,
                      endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None)


@dataclass
class RemoteOptions:
    concurrency: int = 16
    retries: int = 4
    backoff_s: float = 0.25
    timeout_s: float = READ_TIMEOUT_S
    first_read: int = DEFAULT_FIRST_READ
    token_host: str | None = None  # the only host HF_TOKEN is ever sent to
    deadline_s: float = REQUEST_DEADLINE_S  # one whole request, however slowly its bytes come
    # A URL source's own host: a redirect elsewhere is refused (None: hf://, whose files live on a CDN).
    same_host: str | None = None


class RedirectRefusedError(RemoteError):
    """A redirect would leave the host the user named."""


class TooSlowError(RemoteError):
    """A request ran past its whole-request deadline, or the audit was stopped."""


@contextlib.contextmanager
def _served(url: str) -> Iterator[None]:
    """Bytes a server sent that are not what they claim (a header, an index) are the server's fault: exit 3, with
    the URL named, where a local file's would be the user's (exit 2)."""
    try:
        yield
    except (RemoteError, AccessError):
        raise
    except InputError as e:
        msg = str(e)
        raise RemoteError(msg if url in msg else f"{url}: {msg}") from None


class _Remote:
    """One httpx client shared by the shard threads (httpx.Client is thread-safe)."""

    def __init__(self, opts: RemoteOptions):
        self.opts = opts
        # Set on SIGINT/SIGTERM in the main thread: every shard thread stops at its next chunk.
        self.stop = threading.Event()

        def same_host(request: httpx.Request) -> None:
            if opts.same_host and request.url.host != opts.same_host:
                raise RedirectRefusedError(
                    f"{opts.same_host}: a redirect leads to another host ({redact_url(str(request.url))[:200]}); the "
                    "audit reads only from the host named. Give the final URL, or an hf:// source")

        self.client = httpx.Client(
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            event_hooks={"request": [same_host]},
            timeout=httpx.Timeout(opts.timeout_s),
            limits=httpx.Limits(max_connections=max(1, opts.concurrency), max_keepalive_connections=opts.concurrency),
            headers={"User-Agent": "offload-lab checkpoint audit (header-only range reads)"},
        )

    def close(self) -> None:
        self.client.close()

    def _headers(self, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        token = os.environ.get(HF_TOKEN_ENV)
        # httpx drops Authorization itself when a redirect leaves this host (e.g. to a CDN with signed URLs).
        if token and self.opts.token_host and urlsplit(url).hostname == self.opts.token_host:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _retrying(self, url: str, what: str, fn):  # type: ignore[no-untyped-def]
        last: str = ""
        for attempt in range(self.opts.retries + 1):
            try:
                return fn()
            except _Retryable as e:
                last = str(e)
            except httpx.TooManyRedirects:
                raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects; give the file's final URL") from None
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.opts.retries:
                time.sleep(self.opts.backoff_s * (2 ** attempt))
        raise FetchError(f"{url}: could not read {what} after {self.opts.retries + 1} attempts (last: {last})")

    def get_json(self, url: str, missing_ok: bool = False) -> tuple[Any, httpx.Headers] | None:
        def once() -> tuple[Any, httpx.Headers] | None:
            return within(self.opts.deadline_s + 1.0, lambda: read(), lambda: self._late(url))

        def read() -> tuple[Any, httpx.Headers] | None:
            deadline = time.monotonic() + self.opts.deadline_s
            with self.client.stream("GET", url, headers=self._headers(url)) as r:
                if r.status_code == 404 and missing_ok:
                    return None
                _raise_for_status(r, url)
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    self._check_time(url, deadline)
                    if len(buf) > MAX_JSON_BYTES:
                        raise RemoteError(f"{url}: more than {MAX_JSON_BYTES:,} bytes for a JSON file (an index or "
                                         "config.json is far smaller); not the file asked for")
                headers = r.headers
            try:
                return json.loads(bytes(buf), parse_constant=_no_constant, parse_float=_finite), headers
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError) as e:
                raise RemoteError(f"{url}: not JSON ({str(e)[:120]})") from None

        return self._retrying(url, "the JSON file", once)

    def read_header(self, url: str, file: str) -> tuple[Shard, httpx.Headers]:
        state = {"requests": 0, "received": 0}

        def once() -> tuple[Shard, httpx.Headers]:
            state["requests"] = 0
            state["received"] = 0
            with _served(url):
                return self._read_header_once(url, file, state)

        return self._retrying(url, "the safetensors header", once)

    def _read_header_once(self, url: str, file: str, state: dict[str, int]) -> tuple[Shard, httpx.Headers]:
        first = max(8, self.opts.first_read)
        buf, total, headers = self._range(url, 0, first - 1, None, state)
        n = header_length(buf, url)
        need = 8 + n
        if len(buf) < need:
            more, total2, _ = self._range(url, len(buf), need - 1, need, state)
            buf += more
            total = total if total is not None else total2
        if len(buf) < need:
            raise RemoteError(f"{url}: the file ends inside its {n}-byte header; truncated")
        metadata, tensors = parse_header(buf[8:need], file, total)
        shard = Shard(file=file, header_bytes=n, file_bytes=total, metadata=metadata, tensors=tensors,
                      fetched_bytes=state["received"], requests=state["requests"])
        return shard, headers

    def _check_time(self, url: str, deadline: float) -> None:
        if self.stop.is_set():
            raise TooSlowError(f"{url}: stopped")
        if time.monotonic() > deadline:
            raise self._late(url)

    def _range(self, url: str, start: int, end: int, header_end: int | None,
               state: dict[str, int]) -> tuple[bytes, int | None, httpx.Headers]:
        """Bytes [start, end] of url, and the file's total size when the server says it; within the deadline even
        when the server trickles its status line or headers (which no per-read timeout catches)."""
        return within(self.opts.deadline_s + 1.0, lambda: self._range_once(url, start, end, header_end, state),
                      lambda: self._late(url))

    def _late(self, url: str) -> TooSlowError:
        return TooSlowError(f"{url}: the request took longer than its {self.opts.deadline_s:g} s deadline (a "
                            "server sending bytes too slowly); try again later or pass a larger deadline")

    def _range_once(self, url: str, start: int, end: int, header_end: int | None,
                    state: dict[str, int]) -> tuple[bytes, int | None, httpx.Headers]:
        state["requests"] += 1
        deadline = time.monotonic() + self.opts.deadline_s
        with self.client.stream("GET", url, headers=self._headers(url, {"Range": f"bytes={start}-{end}"})) as r:
            if r.status_code == 200:
                self._abort_full_body(r, url, state, header_end, deadline)
            if r.status_code == 416:
                raise RemoteError(f"{url}: the server says byte {start} is past the end of the file (416)")
            _raise_for_status(r, url)
            if r.status_code != 206:
                raise RemoteError(f"{url}: expected 206 Partial Content for a range request, got {r.status_code}")
            got_start, got_end, total = _content_range(r.headers.get("content-range"), url)
            if got_start != start:
                raise RemoteError(f"{url}: asked for bytes from {start}, the server sent them from {got_start}")
            if got_end > end:
                raise RemoteError(f"{url}: asked for bytes {start}-{end}, the server's Content-Range says it sends up "
                                 f"to byte {got_end}")
            promised = got_end - start + 1
            chunks = []
            size = 0
            # iter_raw: a Content-Encoding would make the decoded size differ from the bytes the range counts.
            for chunk in r.iter_raw():
                chunks.append(chunk)
                size += len(chunk)
                state["received"] += len(chunk)
                if size > promised:
                    raise RemoteError(f"{url}: the server sent more than the {promised} bytes its Content-Range "
                                     f"({start}-{got_end}) promised")
                self._check_time(url, deadline)
            if size != promised:
                raise RemoteError(f"{url}: the server sent {size} bytes where its Content-Range ({start}-{got_end}) "
                                 f"promised {promised}; a broken server or connection")
            return b"".join(chunks), total, r.headers

    def _abort_full_body(self, r: httpx.Response, url: str, state: dict[str, int], header_end: int | None,
                         deadline: float) -> None:
        # The server ignored Range and is sending the whole file. Read only as far as the header reaches (its length
        # is in the first 8 bytes), then close the connection: nothing past the header is downloaded.
        buf = b""
        need = header_end
        for chunk in r.iter_raw():
            buf += chunk
            state["received"] += len(chunk)
            self._check_time(url, deadline)
            if need is None and len(buf) >= 8:
                need = 8 + header_length(buf, url)
            if need is not None and len(buf) >= need:
                break
        length = r.headers.get("content-length")
        size = f"{int(length):,} bytes" if length and length.isdigit() else "the whole file"
        raise RangeNotSupportedError(
            f"{url}: the server ignored the Range header and answered 200 with {size}; the transfer was aborted "
            f"after {state['received']:,} bytes (the header), so no weights were downloaded. Audit through a server "
            "that honours range requests (any CDN, nginx, Hugging Face) or download the shard and audit the local file."
        )


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is beyond a finite number")
    return value


class _Retryable(Exception):
    pass


def _raise_for_status(r: httpx.Response, url: str) -> None:
    if r.status_code in RETRY_STATUSES:
        raise _Retryable(f"HTTP {r.status_code}")
    if r.status_code in (401, 403):
        raise AccessError(f"{url}: HTTP {r.status_code}; a gated or private repository needs a token in the "
                         f"{HF_TOKEN_ENV} environment variable (never on the command line)")
    if r.status_code == 404:
        raise AccessError(f"{url}: HTTP 404, no such file (check the repository, revision and file name)")
    if r.status_code >= 400:
        raise RemoteError(f"{url}: HTTP {r.status_code}")


def _content_range(value: str | None, url: str) -> tuple[int, int, int | None]:
    """(first byte, last byte, total or None) of a Content-Range header, each a number below 2**63."""
    m = re.fullmatch(r"\s*bytes\s+([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)\s*", (value or "")[:200])
    if not m:
        raise RemoteError(f"{url}: a 206 answer without a valid Content-Range header ({(value or '')[:60]!r})")
    first, last = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if last < first or (total is not None and last >= total) or max(first, last, total or 0) >= 2 ** 63:
        raise RemoteError(f"{url}: Content-Range {(value or '')[:60]!r} is not a byte range of the file")
    return first, last, total


def read_remote(source: str, opts: RemoteOptions | None = None, hf_endpoint: str | None = None) -> Checkpoint:
    """Headers of a remote checkpoint (a URL or hf://owner/name@revision); see the module docstring."""
    opts = dataclasses.replace(opts) if opts else RemoteOptions()  # a copy: token_host is set per source below
    add_url_secrets(source)  # a URL's own credentials never reach a message or a record
    t0 = time.monotonic()
    hf = parse_hf_source(source) if source.startswith("hf://") else None
    if hf:
        def url_of(name: str) -> str:
            return hf_file_url(hf, name, hf_endpoint)

        opts.token_host = urlsplit(url_of(CONFIG_NAME)).hostname
        single = index = None
    else:
        if not re.match(r"https?://", source):
            raise InputError(f"{source}: not an http(s) URL")
        opts.same_host = urlsplit(source).hostname
        base, _, last = source.rstrip("/").rpartition("/")
        single = source if last.endswith(".safetensors") else None
        index = source if last.endswith(".json") else None
        root = base if (single or index) else source.rstrip("/")

        def url_of(name: str) -> str:
            return f"{root}/{name}"

    remote = _Remote(opts)
    try:
        commit: str | None = None
        weight_map: dict[str, str] | None = None
        if single:
            files = [single.rpartition("/")[2]]
        else:
            got = remote.get_json(index or url_of(INDEX_NAME), missing_ok=index is None)
            if got is None:
                files = [SINGLE_NAME]
            else:
                with _served(index or url_of(INDEX_NAME)):
                    files, weight_map = index_files(got[0], index or url_of(INDEX_NAME))
                commit = got[1].get("x-repo-commit")
        config_got = remote.get_json(url_of(CONFIG_NAME), missing_ok=True)
        config = config_got[0] if config_got else None
        if config is not None and not isinstance(config, dict):
            raise RemoteError(f"{redact_url(url_of(CONFIG_NAME))}: config.json is a JSON {type(config).__name__}, not "
                              "an object")
        if config_got and not commit:
            commit = config_got[1].get("x-repo-commit")
        pool = cf.ThreadPoolExecutor(max_workers=max(1, opts.concurrency))
        try:
            results = list(pool.map(lambda f: remote.read_header(single or url_of(f), f), files))
        except BaseException:
            # SIGINT/SIGTERM (or one shard's error): the other threads stop at their next chunk; never wait for a
            # slow server before the error is reported.
            remote.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    finally:
        remote.close()
    shards = [s for s, _ in results]
    commit = commit or next((h.get("x-repo-commit") for _, h in results if h.get("x-repo-commit")), None)
    # What the audit records and prints (--json too): never the URL's own user:password.
    ckpt = Checkpoint(source=redact_url(source), kind="hf" if hf else "url", shards=shards, config=config,
                      revision=hf.revision if hf else None, commit=commit)
    if weight_map is not None:
        with _served(index or url_of(INDEX_NAME)):
            check_index(ckpt, weight_map, index or url_of(INDEX_NAME))
    ckpt.seconds = time.monotonic() - t0
    return ckpt
