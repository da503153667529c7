"""The load generator's core: one streamed request against an OpenAI-compatible server, timed as vLLM defines it.

Every server-sent line is timestamped with a monotonic nanosecond clock the moment it arrives, before any parsing.
Token counts come from the server's usage (``stream_options.include_usage`` and ``continuous_usage_stats``), so a
chunk that carries several tokens (speculative decoding) is counted right. The metrics follow vLLM's names:

- TTFT: request sent -> first chunk carrying generated text (a role-only chat chunk is recorded apart);
- TPOT: (last token time - first token time) / (output tokens - 1);
- ITL: gaps between token-bearing chunks;
- per-stream tok/s: output tokens / (last token time - first token time), the study's "tok/s per stream".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Coroutine, TypeVar

import aiohttp
import httpx
import orjson

from offload_lab.core.errors import ServerError

# A queued long prefill can take minutes (vLLM's own benchmark allows hours); a connection that cannot be made fails
# fast instead.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 3600.0

T = TypeVar("T")

ERROR_KINDS = ("connect", "http_status", "stream_error", "timeout", "short_output", "other")


@dataclass
class RequestRecord:
    """What one request did, with raw timestamps (ns, monotonic) and the metrics derived from them."""

    request_id: str
    endpoint: str
    t_sent_ns: int
    t_first_byte_ns: int | None = None
    t_role_ns: int | None = None
    t_first_token_ns: int | None = None
    t_last_token_ns: int | None = None
    t_end_ns: int | None = None
    token_times_ns: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    # Send stamps that a calibrated source puts in its chunks (x_sent_ns), one per token-bearing chunk.
    server_sent_ns: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    text: str = ""
    expected_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def output_tokens(self) -> int:
        """Tokens from the server's usage; the chunk count only if the server sent no usage."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.chunk_tokens)

    @property
    def ttft_s(self) -> float | None:
        if self.t_first_token_ns is None:
            return None
        return (self.t_first_token_ns - self.t_sent_ns) / 1e9

    @property
    def e2e_s(self) -> float | None:
        if self.t_end_ns is None:
            return None
        return (self.t_end_ns - self.t_sent_ns) / 1e9

    @property
    def decode_s(self) -> float | None:
        if self.t_first_token_ns is None or self.t_last_token_ns is None:
            return None
        return (self.t_last_token_ns - self.t_first_token_ns) / 1e9

    @property
    def tpot_ms(self) -> float | None:
        d, n = self.decode_s, self.output_tokens
        if d is None or n < 2:
            return None
        return d * 1e3 / (n - 1)

    @property
    def itl_ms(self) -> list[float]:
        t = self.token_times_ns
        return [(b - a) / 1e6 for a, b in zip(t, t[1:])]

    @property
    def tok_s(self) -> float | None:
        d, n = self.decode_s, self.output_tokens
        if not d or n < 2:
            return None
        return n / d

    def event(self, **extra: Any) -> dict[str, Any]:
        """The JSON Lines event: raw timestamps and the derived metrics, text left out (it can be large).

        A shallow dict (the lists are shared, not copied): it is serialized at once, and at a level's request
        boundaries every stream builds one, so its cost lands on other streams' timestamps."""
        raw = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "text"}
        raw.update(
            ttft_s=self.ttft_s, tpot_ms=self.tpot_ms, e2e_s=self.e2e_s, tok_s=self.tok_s,
            output_tokens=self.output_tokens, ok=self.ok,
        )
        raw.update(extra)
        return raw


def completion_payload(model: str, prompt: str | list[int], max_tokens: int, *, ignore_eos: bool = True,
                       temperature: float = 0.0, **extra: Any) -> dict[str, Any]:
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        payload["ignore_eos"] = True
        payload["min_tokens"] = max_tokens
    payload.update(extra)
    return payload


def chat_payload(model: str, messages: list[dict[str, Any]], max_tokens: int, *, ignore_eos: bool = True,
                 temperature: float = 0.0, **extra: Any) -> dict[str, Any]:
    payload = completion_payload(model, "", max_tokens, ignore_eos=ignore_eos, temperature=temperature, **extra)
    del payload["prompt"]
    payload["messages"] = messages
    return payload


def _chunk_text(chunk: dict[str, Any]) -> str | None:
    """Generated text in a chunk, '' for a chunk with a choice but no text, None for a chunk with no choice."""
    choices = chunk.get("choices") or []
    if not choices:
        return None
    c = choices[0]
    if "text" in c:
        return c.get("text") or ""
    delta = c.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or delta.get("reasoning") or "")


def _apply_usage(rec: RequestRecord, usage: dict[str, Any] | None) -> int | None:
    """Record usage; return how many completion tokens this chunk added (continuous usage), if known."""
    if not usage:
        return None
    before = rec.completion_tokens or 0
    rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
    rec.completion_tokens = usage.get("completion_tokens", rec.completion_tokens)
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        rec.cached_tokens = details["cached_tokens"]
    if rec.completion_tokens is None:
        return None
    return rec.completion_tokens - before


async def stream_request(client: aiohttp.ClientSession, base_url: str, endpoint: str, payload: dict[str, Any],
                         expected_tokens: int | None = None) -> RequestRecord:
    """Send one streamed request and time it. Never raises for server-side trouble: the record says what failed.

    The hot loop only stamps and keeps each raw read; splitting into events and parsing JSON happen after the
    stream ends, so that with many streams one stream's parsing cannot delay another's timestamps. (aiohttp, not
    httpx, for this loop: against the calibrated token source at 64 streams its per-read cost kept the p99 timing
    error under a millisecond, where httpx's was several.)
    """
    rec = RequestRecord(request_id=uuid.uuid4().hex, endpoint=endpoint, t_sent_ns=0, expected_tokens=expected_tokens)
    url = base_url.rstrip("/") + endpoint
    reads: list[tuple[int, bytes]] = []
    body = orjson.dumps(payload)  # encoded before the clock starts: a long prompt takes a while to serialize
    rec.t_sent_ns = time.monotonic_ns()
    try:
        async with client.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            rec.status = resp.status
            if resp.status != 200:
                body = (await resp.read()).decode(errors="replace")
                rec.t_end_ns = time.monotonic_ns()
                rec.error_kind, rec.error = "http_status", f"HTTP {resp.status}: {body[:500]}"
                return rec
            async for raw in resp.content.iter_any():
                reads.append((time.monotonic_ns(), raw))
    except aiohttp.ClientConnectorError as e:
        rec.error_kind, rec.error = "connect", str(e) or type(e).__name__
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as e:
        rec.error_kind, rec.error = "timeout", str(e) or type(e).__name__
    except aiohttp.ClientError as e:
        rec.error_kind, rec.error = "stream_error", f"{type(e).__name__}: {e}"
    except (OSError, ValueError) as e:
        rec.error_kind, rec.error = "other", f"{type(e).__name__}: {e}"
    rec.t_end_ns = rec.t_end_ns or time.monotonic_ns()
    if reads:
        rec.t_first_byte_ns = reads[0][0]
    try:
        _parse_events(rec, sse_events(reads))
    except orjson.JSONDecodeError as e:
        rec.error_kind = rec.error_kind or "stream_error"
        rec.error = rec.error or f"a chunk is not JSON: {e}"
    except (AttributeError, TypeError, KeyError, IndexError) as e:
        # JSON of the wrong shape: a server-side fault, recorded, never a crash of the whole level.
        rec.error_kind = rec.error_kind or "other"
        rec.error = rec.error or f"a chunk has an unexpected shape: {type(e).__name__}: {e}"
    if rec.error_kind is None and expected_tokens is not None and rec.output_tokens < expected_tokens:
        rec.error_kind = "short_output"
        rec.error = f"asked for {expected_tokens} tokens, got {rec.output_tokens}"
    return rec


def sse_events(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The ``data:`` payloads of a server-sent event stream, each stamped with the read that completed its line."""
    events: list[tuple[int, bytes]] = []
    buffer = b""
    for stamp, raw in reads:
        buffer += raw
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                events.append((stamp, line[5:].strip()))
    return events


def _parse_events(rec: RequestRecord, events: list[tuple[int, bytes]]) -> None:
    pieces: list[str] = []
    for stamp, data in events:
        if data == b"[DONE]":
            break
        chunk = orjson.loads(data)
        if "error" in chunk and not chunk.get("choices"):
            rec.error_kind, rec.error = "stream_error", json.dumps(chunk["error"])[:500]
            break
        added = _apply_usage(rec, chunk.get("usage"))
        text = _chunk_text(chunk)
        if text is None:
            continue
        choice = chunk["choices"][0]
        if choice.get("finish_reason"):
            rec.finish_reason = choice["finish_reason"]
        if not (text or (added is not None and added > 0)):
            if rec.t_role_ns is None and rec.t_first_token_ns is None:
                rec.t_role_ns = stamp
            continue
        if rec.t_first_token_ns is None:
            rec.t_first_token_ns = stamp
        rec.t_last_token_ns = stamp
        rec.token_times_ns.append(stamp)
        rec.chunk_tokens.append(added if added is not None else 1)
        if "x_sent_ns" in chunk:
            rec.server_sent_ns.append(int(chunk["x_sent_ns"]))
        pieces.append(text)
    rec.text = "".join(pieces)


def check_reachable(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Fail within seconds, with a clear message, when nothing answers at ``base_url``."""
    try:
        with httpx.Client(timeout=timeout_s) as client:
            models = client.get(base_url.rstrip("/") + "/v1/models")
            models.raise_for_status()
            return models.json()
    except httpx.HTTPError as e:
        raise ServerError(
            f"no OpenAI-compatible server answers at {base_url} ({type(e).__name__}: {e}); "
            "start one with `offload-lab serve --stack configs/stacks/embedded.yaml` or pass the right --url"
        ) from e


def first_model(base_url: str) -> str:
    data = check_reachable(base_url).get("data") or []
    if not data:
        raise ServerError(f"the server at {base_url} lists no model in /v1/models")
    return data[0]["id"]


def new_async_client(streams: int = 1) -> aiohttp.ClientSession:
    """A streaming client whose connection pool is larger than the number of streams, so no request waits for one."""
    connector = aiohttp.TCPConnector(limit=max(streams, 1) + 4, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also inside Jupyter (whose kernel already runs a loop:
    there the coroutine gets a loop of its own in a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def run_one(base_url: str, endpoint: str, payload: dict[str, Any], expected_tokens: int | None = None) -> RequestRecord:
    """Synchronous convenience for notebooks and tests: one request on a fresh client."""

    async def go() -> RequestRecord:
        async with new_async_client() as client:
            return await stream_request(client, base_url, endpoint, payload, expected_tokens)

    return run_sync(go())
