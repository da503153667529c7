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

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import aiohttp
import httpx

from offload_lab.core.errors import InputError, ServerError
from offload_lab.core.redact import looks_secret, redact_text, redact_url

# A queued long prefill can take minutes (vLLM's own benchmark allows hours); a connection that cannot be made fails
# fast instead.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 3600.0
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
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    read_timeout_s: float = READ_TIMEOUT_S
    headers: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", _checked(self.base_url))
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
        """What a manifest may say about the server."""
        return {"url": self.redacted}

    # --- clients -------------------------------------------------------------------------------------------------

    def async_session(self, streams: int = 1) -> aiohttp.ClientSession:
        """A streaming client whose pool is larger than the number of streams, so that no request waits for a
        connection."""
        connector = aiohttp.TCPConnector(limit=max(streams, 1) + 4, force_close=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s, sock_read=self.read_timeout_s)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self.headers or None)

    def sync_client(self, timeout_s: float = 120.0) -> httpx.Client:
        return httpx.Client(timeout=timeout_s, headers=self.headers or None)

    # --- synchronous helpers the experiments use -----------------------------------------------------------------

    def get(self, path: str, timeout_s: float = 10.0) -> httpx.Response:
        with self.sync_client(timeout_s) as c:
            return c.get(self.url(path))

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> httpx.Response:
        with self.sync_client(timeout_s) as c:
            return c.post(self.url(path), json=body)

    def check_reachable(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """``/v1/models``, or a :class:`ServerError` within seconds naming the (redacted) URL."""
        try:
            r = self.get("/v1/models", timeout_s)
            r.raise_for_status()
            return r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise ServerError(
                f"no OpenAI-compatible server answers at {self.redacted} ({type(e).__name__}: "
                f"{redact_text(str(e))}); start one with "
                "`offload-lab serve --stack configs/stacks/embedded.yaml` or pass the right --url"
            ) from None

    def first_model(self) -> str:
        data = self.check_reachable().get("data") or []
        if not data:
            raise ServerError(f"the server at {self.redacted} lists no model in /v1/models")
        return data[0]["id"]

    def metrics_text(self, timeout_s: float = 10.0) -> str | None:
        """The raw ``/metrics`` exposition, None when the server has none."""
        try:
            r = self.get("/metrics", timeout_s)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None
