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
from collections.abc import Coroutine
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import aiohttp
import orjson

from offload_lab.core.redact import redact_text
from offload_lab.load import responses
from offload_lab.load.endpoint import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, Endpoint  # noqa: F401 (re-exported)

T = TypeVar("T")
Reads = list[tuple[int, bytes]]
# Default timeouts for a session made without an endpoint (the URL goes with each request).
_DEFAULT = Endpoint("http://127.0.0.1")

# bad_response: a chunk of the wrong shape or out of bounds; lie: usage or finish_reason contradicting the stream or
# the request; no_done: the stream ended without its [DONE] marker (cut off, so its counts are not whole).
ERROR_KINDS = ("connect", "http_status", "stream_error", "timeout", "short_output", "bad_response", "lie", "no_done",
               "other")
# A stream's bytes are bounded too: vLLM sends ~300-400 bytes a token with continuous usage; 16 KiB a token and 1 MiB
# besides is far above any real stream, and far below a server streaming filler until the deadline.
STREAM_BYTES_BASE = 1 << 20
STREAM_BYTES_PER_TOKEN = 16 << 10
PROMPT_SLACK = 256  # tokens a chat template may add to a prompt (usage_lie)


# The text can be large; the prompt's sent length is the event's expected_prompt_tokens already (load.share).
_NOT_IN_EVENT = ("text", "sent_prompt_tokens")


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
    max_tokens: int | None = None
    done: bool = False  # the stream's [DONE] marker came
    text_chunks: int = 0  # chunks that carried text (each holds at least one token)
    text_after_finish: int = 0  # chunks with text after the one that gave a finish_reason (a stream that lies)
    sent_prompt_tokens: int | None = None  # the prompt's tokens as the client built it (None: not known)

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
        raw = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_IN_EVENT}
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


class _Bad(Exception):
    """A chunk of the wrong shape or out of bounds (turned into the record's bad_response)."""


def _choice(chunk: dict[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise _Bad(f"'choices' must be a list of objects, got {responses.quote(choices)}")
    return choices[0]


def _str(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Bad(f"{field!r} must be a string, got {responses.quote(value)}")
    return value


def _chunk_text(chunk: dict[str, Any]) -> str | None:
    """Generated text in a chunk, '' for a chunk with a choice but no text, None for a chunk with no choice."""
    c = _choice(chunk)
    if c is None:
        return None
    if "text" in c:
        return _str(c.get("text"), "text")
    delta = c.get("delta") or {}
    if not isinstance(delta, dict):
        raise _Bad(f"'delta' must be an object, got {responses.quote(delta)}")
    return (_str(delta.get("content"), "delta.content")
            + _str(delta.get("reasoning_content") or delta.get("reasoning"), "delta.reasoning_content"))


def _apply_usage(rec: RequestRecord, usage: Any) -> int | None:
    """Record usage (checked: counts are integers from 0 to MAX_TOKENS); return how many completion tokens this
    chunk added (continuous usage), if known."""
    if not usage:
        return None
    try:
        u = responses.Usage.model_validate(usage)
    except responses.ValidationError as e:
        err = e.errors(include_input=False)[0]
        field = "usage." + ".".join(str(p) for p in err["loc"])
        raise _Bad(f"{field!r}: {err['msg'].lower()}, got {responses.quote(responses.at(usage, err['loc']))}") from None
    before = rec.completion_tokens or 0
    if u.prompt_tokens is not None:
        rec.prompt_tokens = u.prompt_tokens
    if u.completion_tokens is not None:
        rec.completion_tokens = u.completion_tokens
    if u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens is not None:
        rec.cached_tokens = u.prompt_tokens_details.cached_tokens
    if rec.completion_tokens is None:
        return None
    return rec.completion_tokens - before


async def stream_raw(client: aiohttp.ClientSession, base_url: str | Endpoint, endpoint: str,
                     payload: dict[str, Any], expected_tokens: int | None = None,
                     prompt_tokens: int | None = None) -> tuple[RequestRecord, Reads]:
    """The hot loop: send one streamed request and keep every raw read with its arrival stamp, nothing parsed.

    Transport failures and an HTTP error status are recorded on the record; everything else waits for
    :func:`finish_record`, which a level may defer to its end (see :mod:`offload_lab.load.closed_loop`): parsing a
    finished stream on the loop that stamps the others delays their tokens, and streams of one batch finish
    together. (aiohttp, not httpx, for this loop: against the calibrated token source at 64 streams its per-read
    cost kept the p99 timing error under a millisecond, where httpx's was several.)
    """
    max_tokens = payload.get("max_tokens")
    max_tokens = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    rec = RequestRecord(request_id=uuid.uuid4().hex, endpoint=endpoint, t_sent_ns=0, expected_tokens=expected_tokens,
                        max_tokens=max_tokens, sent_prompt_tokens=prompt_tokens)
    ep = base_url if isinstance(base_url, Endpoint) else _DEFAULT
    url = str(getattr(base_url, "base_url", base_url)).rstrip("/") + endpoint
    reads: Reads = []
    body = orjson.dumps(payload)  # encoded before the clock starts: a long prompt takes a while to serialize
    deadline_s = ep.request_deadline(max_tokens)
    first_byte_ns = int(ep.read_timeout_s * 1e9)
    max_bytes = STREAM_BYTES_BASE + STREAM_BYTES_PER_TOKEN * (max_tokens or 0)
    timeout = aiohttp.ClientTimeout(total=deadline_s, sock_connect=ep.connect_timeout_s, sock_read=ep.read_timeout_s)
    rec.t_sent_ns = time.monotonic_ns()
    try:
        # No redirects: a 3xx is an answer of the wrong kind, and following it could leave the host named.
        async with client.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=timeout,
                               allow_redirects=False) as resp:
            rec.status = resp.status
            if resp.status != 200:
                text = (await resp.content.read(2000)).decode(errors="replace")
                rec.t_end_ns = time.monotonic_ns()
                rec.error_kind, rec.error = "http_status", f"HTTP {resp.status}: {text[:500]}"
                return rec, reads
            seen_data, size = False, 0
            async for raw in resp.content.iter_any():
                now = time.monotonic_ns()
                reads.append((now, raw))
                size += len(raw)
                if size > max_bytes:
                    rec.error_kind = "bad_response"
                    rec.error = f"the stream ran past {max_bytes:,} bytes for {max_tokens} tokens; cut off"
                    break
                # Comments or bytes trickled to keep the connection open are no progress: the first data event
                # must come within the first-byte deadline.
                if not seen_data:
                    seen_data = b"data:" in raw
                    if not seen_data and now - rec.t_sent_ns > first_byte_ns:
                        rec.error_kind = "timeout"
                        rec.error = (f"no data event within the first-byte deadline of {ep.read_timeout_s:g} s "
                                     "(only comments or stray bytes came)")
                        break
    except aiohttp.ClientConnectorError as e:
        rec.error_kind, rec.error = "connect", str(e) or type(e).__name__
    except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as e:
        rec.error_kind = "timeout"
        rec.error = (f"{type(e).__name__}: past a deadline (connect {ep.connect_timeout_s:g} s, silence "
                     f"{ep.read_timeout_s:g} s, whole request {deadline_s:g} s) {e}").strip()
    except aiohttp.TooManyRedirects as e:
        rec.error_kind, rec.error = "http_status", f"redirected ({type(e).__name__}); redirects are not followed"
    except aiohttp.ClientError as e:
        rec.error_kind, rec.error = "stream_error", f"{type(e).__name__}: {e}"
    except (OSError, ValueError) as e:
        rec.error_kind, rec.error = "other", f"{type(e).__name__}: {e}"
    rec.t_end_ns = rec.t_end_ns or time.monotonic_ns()
    return rec, reads


def finish_record(rec: RequestRecord, reads: Reads) -> RequestRecord:
    """Parse the raw reads into the record's tokens and usage and classify the outcome (never raises)."""
    if reads:
        rec.t_first_byte_ns = reads[0][0]
    try:
        _parse_events(rec, sse_events(reads))
    except orjson.JSONDecodeError as e:
        # orjson refuses invalid UTF-8 and integers beyond 64 bits here too.
        rec.error_kind = rec.error_kind or "bad_response"
        rec.error = rec.error or f"a chunk is not JSON ({str(e).split(':')[0]})"
    except _Bad as e:
        rec.error_kind = rec.error_kind or "bad_response"
        rec.error = rec.error or f"a chunk is out of bounds: {e}"
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
        # JSON of the wrong shape: a server-side fault, recorded, never a crash of the whole level.
        rec.error_kind = rec.error_kind or "bad_response"
        rec.error = rec.error or f"a chunk has an unexpected shape: {type(e).__name__}: {str(e)[:200]}"
    if rec.error_kind is None:
        lie = usage_lie(rec)
        if lie:
            rec.error_kind, rec.error = "lie", lie
        elif not rec.done and reads:
            rec.error_kind, rec.error = "no_done", "the stream ended without its [DONE] marker: cut off"
    if rec.error_kind is None and rec.expected_tokens is not None and rec.output_tokens < rec.expected_tokens:
        rec.error_kind = "short_output"
        rec.error = f"asked for {rec.expected_tokens} tokens, got {rec.output_tokens}"
    if rec.error:
        rec.error = redact_text(rec.error)  # a server's error text may quote the request's key
    return rec


def usage_lie(rec: RequestRecord) -> str | None:
    """Why the server's usage or finish_reason cannot be true of this stream, or None. A request failed so is
    flagged and left out of every figure: a count of 10**9 tokens would otherwise make a rate of 10**12 tok/s."""
    if rec.completion_tokens is not None:
        if rec.max_tokens is not None and rec.completion_tokens > rec.max_tokens:
            return f"usage says {rec.completion_tokens} completion tokens, above the {rec.max_tokens} asked for"
        if rec.completion_tokens == 0 and rec.text:
            return f"usage says 0 completion tokens, but {len(rec.token_times_ns)} chunks carried text"
        # Each chunk with text holds at least one token (one of slack: a server may count the last one apart).
        if rec.completion_tokens < rec.text_chunks - 1:
            return (f"usage says {rec.completion_tokens} completion tokens, but {rec.text_chunks} chunks carried "
                    "text")
    if rec.text_after_finish:
        return (f"finish_reason {rec.finish_reason!r} came, then {rec.text_after_finish} more chunk(s) carried text")
    sent = rec.sent_prompt_tokens
    # A chat template adds some tokens and another tokenizer counts a few differently; a prompt counted at more
    # than twice (plus a template's worth) or under half what was sent is not this prompt.
    if sent and rec.prompt_tokens is not None and not (sent // 2 - PROMPT_SLACK <= rec.prompt_tokens
                                                         <= 2 * sent + PROMPT_SLACK):
        return f"usage says {rec.prompt_tokens} prompt tokens, for a prompt of {sent} tokens as sent"
    if rec.cached_tokens is not None and rec.prompt_tokens is not None and rec.cached_tokens > rec.prompt_tokens:
        return f"usage says {rec.cached_tokens} cached tokens, above the {rec.prompt_tokens} prompt tokens"
    if rec.finish_reason == "length" and rec.max_tokens is not None and rec.completion_tokens is not None \
            and rec.completion_tokens < rec.max_tokens:
        return (f"finish_reason 'length' after {rec.completion_tokens} tokens, below the max_tokens of "
                f"{rec.max_tokens}")
    return None


def quick_ok(rec: RequestRecord, reads: Reads) -> bool:
    """Whether a request succeeded, judged without parsing its stream: transport and status, then only the last
    ``data:`` event (an error event, or the usage that says how many tokens came) and the ``[DONE]`` marker.
    Cheap enough for the stop rule to run on it at once; :func:`finish_record` has the last word."""
    if rec.error_kind is not None:
        return False
    # The last 4 KB of the stream, cut to whole lines: enough for the final chunk, whatever the read sizes.
    k, size = len(reads), 0
    while k > 0 and size < 4096:
        k -= 1
        size += len(reads[k][1])
    tail = b"".join(raw for _, raw in reads[k:])
    if k > 0:
        tail = tail[tail.find(b"\n") + 1:]
    if b"[DONE]" not in tail:
        return False
    events = [line for line in tail.split(b"\n") if line.startswith(b"data:") and b"[DONE]" not in line]
    if not events:
        return rec.expected_tokens is None
    try:
        last = orjson.loads(events[-1][5:].strip())
    except orjson.JSONDecodeError:
        return False
    if not isinstance(last, dict) or ("error" in last and not last.get("choices")):
        return False
    usage = last.get("usage")
    done = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if done is not None and not responses.finite(done, 0, rec.max_tokens if rec.max_tokens is not None else 1e7):
        return False  # out of bounds: the full parse names it
    return rec.expected_tokens is None or done is None or done >= rec.expected_tokens


async def stream_request(client: aiohttp.ClientSession, base_url: str | Endpoint, endpoint: str,
                         payload: dict[str, Any], expected_tokens: int | None = None) -> RequestRecord:
    """Send one streamed request and time it; parsed as soon as it ends. Never raises for server-side trouble:
    the record says what failed. A level with many streams uses :func:`stream_raw` and defers the parse."""
    rec, reads = await stream_raw(client, base_url, endpoint, payload, expected_tokens)
    return finish_record(rec, reads)


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
            rec.done = True
            break
        chunk = orjson.loads(data)
        if not isinstance(chunk, dict):
            raise _Bad(f"a chunk must be a JSON object, got {responses.quote(data)}")
        if "error" in chunk and not chunk.get("choices"):
            rec.error_kind, rec.error = "stream_error", json.dumps(chunk["error"], default=str)[:500]
            break
        added = _apply_usage(rec, chunk.get("usage"))
        text = _chunk_text(chunk)
        if text is None:
            continue
        choice = _choice(chunk) or {}
        rec.text_after_finish += bool(text) and rec.finish_reason is not None
        if choice.get("finish_reason"):
            rec.finish_reason = _str(choice["finish_reason"], "finish_reason")[:40]
        if not (text or (added is not None and added > 0)):
            if rec.t_role_ns is None and rec.t_first_token_ns is None:
                rec.t_role_ns = stamp
            continue
        if rec.t_first_token_ns is None:
            rec.t_first_token_ns = stamp
        rec.t_last_token_ns = stamp
        rec.token_times_ns.append(stamp)
        rec.chunk_tokens.append(added if added is not None else 1)
        rec.text_chunks += bool(text)
        if "x_sent_ns" in chunk:
            sent = chunk["x_sent_ns"]
            if not (isinstance(sent, int) and not isinstance(sent, bool) and 0 <= sent < 2 ** 63):
                raise _Bad(f"'x_sent_ns' must be a clock reading in ns, got {responses.quote(sent)}")
            rec.server_sent_ns.append(sent)
        pieces.append(text)
    rec.text = "".join(pieces)


def check_reachable(base_url: str | Endpoint, timeout_s: float = 5.0) -> dict[str, Any]:
    """Fail within seconds, with a clear message naming the (redacted) URL, when nothing answers there."""
    return Endpoint.of(base_url).check_reachable(timeout_s)


def first_model(base_url: str | Endpoint) -> str:
    return Endpoint.of(base_url).first_model()


def new_async_client(streams: int = 1, endpoint: Endpoint | None = None) -> aiohttp.ClientSession:
    """A streaming client whose connection pool is larger than the number of streams, so no request waits for one."""
    return (endpoint or _DEFAULT).async_session(streams)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also inside Jupyter (whose kernel already runs a loop:
    there the coroutine gets a loop of its own in a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_loop(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run_loop, coro).result()


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """A new event loop for ``coro``: uvloop where it is installed. Its per-read cost is lower: against the
    calibrated token source at 64 and 256 streams, the per-token p99 timing error fell in 12 of 16 paired runs
    (median ratio 0.70) on a shared 2-core machine (issue 25)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def run_one(base_url: str | Endpoint, endpoint: str, payload: dict[str, Any],
            expected_tokens: int | None = None) -> RequestRecord:
    """Synchronous convenience for notebooks and tests: one request on a fresh client."""

    async def go() -> RequestRecord:
        async with Endpoint.of(base_url).async_session() as client:
            return await stream_request(client, base_url, endpoint, payload, expected_tokens)

    return run_sync(go())
