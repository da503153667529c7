"""One object per server: its base URL, its clients, and the form of the URL that may be written down.

Before this, the base URL rode through many functions as a string and two HTTP stacks talked to it: aiohttp for the
timed streams (its per-read cost is the lower one, see :mod:`offload_lab.load.client`) and httpx for everything
synchronous (tokenize, models, metrics). :class:`Endpoint` owns both, so that timeouts, credentials and the URL's
redacted form are decided in one place.

Credentials in a URL (``http://user:secret@host``, or a query parameter named like a key or token) are used for the
requests and never leave the object: :attr:`Endpoint.redacted` (:func:`offload_lab.core.redact.redact_url`) is what
records, manifests and messages carry, and ``str()``/``repr()`` give it too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import aiohttp
import httpx

from offload_lab.core.bounds import MAX_SECONDS, MAX_TOKENS
from offload_lab.core.errors import InputError, ServerError
from offload_lab.core.redact import add_secret, add_url_secrets, looks_secret, redact_text, redact_url
from offload_lab.load import responses
from offload_lab.load.deadline import within

# Deadlines of every request (each can be changed through the environment variable named beside it, which also
# reaches the notebooks a campaign runs, or through `bench`'s flags):
# - connect, 5 s: a server on loopback or a LAN accepts in milliseconds, a cold TLS handshake across continents in
#   well under a second; 5 s without a connection is a wrong URL or a dead host.
# - first byte, 600 s: until the first `data:` event (the first token, or a chat's role chunk) and the longest silence
#   between reads. A long prefill behind a full queue on an offloaded model takes minutes; ten is a stuck server.
#   A server that trickles keep-alive comments without ever sending data runs into it too.
# - whole request: the first-byte deadline plus one second per requested output token (a floor of 1 tok/s, far below
#   the slowest decode the study measures), so a stream that trickles forever still ends; a fixed number instead
#   when OFFLOAD_LAB_REQUEST_DEADLINE_S is set.
# - small requests (/v1/models, /tokenize, /metrics): 30 s for the whole answer.
CONNECT_TIMEOUT_S = 5.0
FIRST_BYTE_TIMEOUT_S = 600.0
READ_TIMEOUT_S = FIRST_BYTE_TIMEOUT_S  # the longest silence between two reads
MIN_DECODE_TOK_S = 1.0
SMALL_REQUEST_TIMEOUT_S = 30.0
CONNECT_ENV = "OFFLOAD_LAB_CONNECT_TIMEOUT_S"
FIRST_BYTE_ENV = "OFFLOAD_LAB_FIRST_BYTE_TIMEOUT_S"
DEADLINE_ENV = "OFFLOAD_LAB_REQUEST_DEADLINE_S"
# The largest answer read from a small endpoint (/metrics of a busy vLLM is ~100 KB; /tokenize of 10M ids ~80 MB).
MAX_SMALL_BYTES = 128 * 1024 * 1024
MAX_METRICS_BYTES = 32 * 1024 * 1024
# A model list names a handful of models in a few hundred bytes each; a megabyte is thousands of them.
MAX_MODELS_BYTES = 1024 * 1024


def _seconds_from_env(name: str, default: float | None) -> float | None:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= MAX_SECONDS):
        raise InputError(f"environment variable {name}={text[:30]!r}: give seconds, a number above 0 and at most "
                         f"{MAX_SECONDS:g}")
    return value


def _default_connect() -> float:
    return _seconds_from_env(CONNECT_ENV, CONNECT_TIMEOUT_S) or CONNECT_TIMEOUT_S


def _default_first_byte() -> float:
    return _seconds_from_env(FIRST_BYTE_ENV, FIRST_BYTE_TIMEOUT_S) or FIRST_BYTE_TIMEOUT_S


def _default_deadline() -> float | None:
    return _seconds_from_env(DEADLINE_ENV, None)


def _checked(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"server URL {redact_url(url)!r} is not an http(s) URL with a host; "
                         "pass one like http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError as e:
        raise InputError(f"server URL {redact_url(url)!r} has a bad port ({e}); pass one like http://127.0.0.1:8000")
    return url.rstrip("/")


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server at ``base_url``: paths, clients and the redacted URL for records."""

    base_url: str
    connect_timeout_s: float = field(default_factory=_default_connect)
    read_timeout_s: float = field(default_factory=_default_first_byte)  # first data event, and any silence
    request_deadline_s: float | None = field(default_factory=_default_deadline)  # None: from max_tokens
    headers: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", _checked(self.base_url))
        # Every credential this endpoint carries is known to the one redaction before any request is sent, so a
        # server that echoes it (or its Basic form) never gets it written down.
        add_url_secrets(self.base_url)
        for name, value in self.headers.items():
            if looks_secret(name) or name.lower() == "authorization":
                add_secret(value.split(" ", 1)[-1])
        # A key in the query (?api_key=...) goes into the Authorization header and out of the URL: paths are joined
        # onto the base URL, and a query would be sent in every request's path, which servers write into their
        # access logs.
        parts = urlsplit(self.base_url)
        if parts.query or parts.fragment:
            pairs = parse_qsl(parts.query, keep_blank_values=True)
            keys = [v for k, v in pairs if looks_secret(k)]
            if len(keys) != len(pairs) or len(keys) > 1 or parts.fragment:
                raise InputError(f"server URL {redact_url(self.base_url)!r} holds a query or fragment other than one "
                                 "key; give the base URL only, e.g. http://127.0.0.1:8000")
            if keys and "Authorization" not in self.headers:
                self.headers["Authorization"] = f"Bearer {keys[0]}"
            object.__setattr__(self, "base_url", urlunsplit(parts._replace(query="", fragment="")).rstrip("/"))

    @classmethod
    def of(cls, target: Endpoint | str) -> Endpoint:
        """Accept either form at an API boundary (notebooks pass strings)."""
        return target if isinstance(target, Endpoint) else cls(target)

    @property
    def redacted(self) -> str:
        return redact_url(self.base_url)

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return f"Endpoint({self.redacted!r})"

    def url(self, path: str) -> str:
        return self.base_url + "/" + path.lstrip("/")

    def record(self) -> dict[str, Any]:
        """What a manifest may say about the server, and the deadlines its requests had."""
        return {"url": self.redacted, "deadlines": self.deadlines()}

    def deadlines(self) -> dict[str, Any]:
        return {"connect_s": self.connect_timeout_s, "first_byte_s": self.read_timeout_s,
                "request_s": self.request_deadline_s if self.request_deadline_s is not None
                else f"first_byte_s + max_tokens / {MIN_DECODE_TOK_S:g} tok/s"}

    def request_deadline(self, max_tokens: Any) -> float:
        """The whole-request deadline of a stream asking for ``max_tokens`` tokens."""
        if self.request_deadline_s is not None:
            return self.request_deadline_s
        n = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0 else 0
        return self.read_timeout_s + min(n, MAX_TOKENS) / MIN_DECODE_TOK_S

    # --- clients -------------------------------------------------------------------------------------------------

    def async_session(self, streams: int = 1) -> aiohttp.ClientSession:
        """A streaming client whose pool is larger than the number of streams, so that no request waits for a
        connection."""
        connector = aiohttp.TCPConnector(limit=max(streams, 1) + 4, force_close=False)
        # The whole-request deadline depends on each request's max_tokens: set per request (load.client).
        timeout = aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s + self.read_timeout_s,
                                        sock_connect=self.connect_timeout_s, sock_read=self.read_timeout_s)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self.headers or None)

    def sync_client(self, timeout_s: float = SMALL_REQUEST_TIMEOUT_S) -> httpx.Client:
        # No redirects: a 3xx is an answer of the wrong kind, and following it could leave the host the user named.
        return httpx.Client(timeout=httpx.Timeout(timeout_s, connect=self.connect_timeout_s),
                            headers=self.headers or None, follow_redirects=False)

    # --- synchronous helpers the experiments use -----------------------------------------------------------------

    def fetch(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout_s: float = SMALL_REQUEST_TIMEOUT_S, max_bytes: int = MAX_SMALL_BYTES) -> tuple[int, bytes]:
        """(status, body) of one small request, with a deadline on the whole answer (not only on each read) and a
        bound on its size; a :class:`ServerError` naming the URL when neither holds or nothing answers."""
        url = self.url(path)
        deadline = time.monotonic() + timeout_s

        def late() -> ServerError:
            return ServerError(f"{redact_url(url)} did not finish its answer within {timeout_s:g} s")

        def call() -> tuple[int, bytes]:
            with self.sync_client(timeout_s) as c, c.stream(method, url, json=body) as r:
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > max_bytes:
                        raise ServerError(f"{redact_url(url)} answered more than {max_bytes:,} bytes; not the "
                                          "answer of an OpenAI-compatible server")
                    if time.monotonic() > deadline:
                        raise late()
                return r.status_code, bytes(buf)

        try:
            # The deadline holds for the status line and headers too (a server trickling them resets every read
            # timeout); a body is also checked chunk by chunk above.
            return within(timeout_s + 1.0, call, late)
        except httpx.HTTPError as e:
            raise ServerError(f"no answer from {redact_url(url)} ({type(e).__name__}: {redact_text(str(e))[:200]}); "
                              "is the server running at that URL?") from None

    def get(self, path: str, timeout_s: float = SMALL_REQUEST_TIMEOUT_S) -> httpx.Response:
        status, raw = self.fetch("GET", path, timeout_s=timeout_s)
        return httpx.Response(status, content=raw, request=httpx.Request("GET", self.url(path)))

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> httpx.Response:
        status, raw = self.fetch("POST", path, body, timeout_s=timeout_s)
        return httpx.Response(status, content=raw, request=httpx.Request("POST", self.url(path)))

    def models(self, timeout_s: float = 5.0) -> list[str]:
        """The model names ``/v1/models`` lists, each checked (:mod:`offload_lab.load.responses`)."""
        try:
            status, raw = self.fetch("GET", "/v1/models", timeout_s=timeout_s, max_bytes=MAX_MODELS_BYTES)
        except ServerError as e:
            raise ServerError(
                f"no OpenAI-compatible server answers at {self.redacted} ({e}); start one with "
                "`offload-lab serve --stack configs/stacks/embedded.yaml` or pass the right --url") from None
        if status != 200:
            raise ServerError(f"the server at {self.redacted} answered /v1/models with HTTP {status} "
                              f"({responses.quote(raw)}); is it an OpenAI-compatible server (and the key right)?")
        listed = responses.parse(responses.ModelList, raw, self.url("/v1/models"))
        return [m.id for m in listed.data]

    def check_reachable(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """``/v1/models`` (checked), or a :class:`ServerError` within seconds naming the (redacted) URL."""
        return {"object": "list", "data": [{"id": name} for name in self.models(timeout_s)]}

    def first_model(self) -> str:
        names = self.models()
        if not names:
            raise ServerError(f"the server at {self.redacted} lists no model in /v1/models")
        return names[0]

    def check_model(self, name: str) -> None:
        """A model list that does not name the model a run asks for is a server that is not the one meant."""
        names = self.models()
        if name not in names:
            raise ServerError(f"the server at {self.redacted} does not list model {name[:100]!r} in /v1/models (it "
                              f"lists {', '.join(repr(n[:60]) for n in names[:5]) or 'none'}); wrong --url or "
                              "--model")

    def metrics_text(self, timeout_s: float = 10.0) -> str | None:
        """The raw ``/metrics`` exposition, None when the server has none (no answer, or not 200)."""
        try:
            status, raw = self.fetch("GET", "/metrics", timeout_s=timeout_s, max_bytes=MAX_METRICS_BYTES)
        except ServerError:
            return None
        if status != 200:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise responses.bad(self.url("/metrics"), "body", "Prometheus text in UTF-8", raw) from None
