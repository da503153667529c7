"""Sending the items: concurrency, retries of infrastructure failures, and one artefact per item.

Each item's final attempt is one line of the side's ``items.jsonl``: the request as sent (URL, redacted headers,
body), the raw response, every attempt with its error, and the status. The status separates failures from wrong
answers:

- ``ok``: the endpoint answered with text and stopped on its own (or on a stop sequence);
- ``empty``: it answered with no text;
- ``truncated``: it stopped at ``max_tokens`` (``finish_reason: length``);
- ``api_error`` / ``timeout``: no answer after every retry (infrastructure; left out of comparisons pairwise).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import httpx

from offload_lab.core import runs
from offload_lab.core.redact import redact_text, redact_url
from offload_lab.load import responses
from offload_lab.load.client import run_sync
from offload_lab.quality import benchmarks, endpoints
from offload_lab.quality.data import Item

STATUSES = ("ok", "empty", "truncated", "api_error", "timeout")
INFRA_FAILURES = ("api_error", "timeout")
# Retried: the endpoint or the network, not the request, was at fault.
RETRY_HTTP = (408, 409, 425, 429, 500, 502, 503, 504, 529)


@dataclass
class CallResult:
    status: str  # "answered", "api_error" or "timeout"
    http_status: int | None = None
    response: dict[str, Any] | None = None
    error: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    latency_s: float | None = None


async def post_with_retries(client: httpx.AsyncClient, spec: endpoints.EndpointSpec, path: str,
                            body: dict[str, Any], headers: dict[str, str],
                            sleep: Callable[[float], Any] = asyncio.sleep) -> CallResult:
    """POST ``body``; retry connection errors, timeouts and retryable HTTP statuses with doubling back-off."""
    url = spec.base + path
    result = CallResult(status="api_error")
    for attempt in range(spec.retries + 1):
        if attempt:
            await sleep(spec.backoff_s * 2 ** (attempt - 1))
        t0 = time.monotonic()
        try:
            resp = await client.post(url, json=body, headers=headers, timeout=spec.timeout_s)
        except httpx.TimeoutException as e:
            result.attempts.append({"attempt": attempt, "error": f"timeout: {type(e).__name__}"})
            result.status, result.error = "timeout", redact_text(f"{type(e).__name__}: {e}")
            continue
        except httpx.HTTPError as e:
            result.attempts.append({"attempt": attempt, "error": redact_text(f"{type(e).__name__}: {e}")})
            result.status, result.error = "api_error", redact_text(f"{type(e).__name__}: {e}")
            continue
        latency = time.monotonic() - t0
        result.http_status, result.latency_s = resp.status_code, latency
        result.attempts.append({"attempt": attempt, "http_status": resp.status_code, "latency_s": latency})
        if resp.status_code == 200:
            try:
                result.response = resp.json()
            except ValueError as e:
                result.status, result.error = "api_error", f"response is not JSON: {str(e)[:120]}"
                continue
            if not isinstance(result.response, dict):
                # A server's answer is input: anything but an object is a failed call, never a crash later on.
                result.status, result.error = "api_error", (
                    f"response is a JSON {type(result.response).__name__}, not an object: "
                    f"{responses.quote(resp.content)}")
                result.response = None
                continue
            result.status, result.error = "answered", None
            return result
        # A server's error text may quote the request's key (a proxy's error page): kept only once redacted.
        result.status, result.error = "api_error", redact_text(f"HTTP {resp.status_code}: {resp.text[:1000]}")
        if resp.status_code not in RETRY_HTTP:
            return result
    return result


def classify(call: CallResult) -> tuple[str, dict[str, Any]]:
    """Item status and the response's parts."""
    if call.status != "answered" or call.response is None:
        return call.status, {}
    parts = endpoints.message_parts(call.response)
    if not (parts["content"] or "").strip():
        return "empty", parts
    if parts["finish_reason"] == "length":
        return "truncated", parts
    return "ok", parts


async def request_item(client: httpx.AsyncClient, spec: endpoints.EndpointSpec, model: str, item: Item,
                       replicate: int, max_tokens: int | None, headers: dict[str, str]) -> dict[str, Any]:
    req = benchmarks.build_request(item, max_tokens)
    body = endpoints.chat_payload(spec, model, req.messages, req.max_tokens, req.stop, req.continuation)
    path = spec.chat_path(req.continuation)
    started = runs.utc_now()
    call = await post_with_retries(client, spec, path, body, headers)
    status, parts = classify(call)
    return {
        "kind": "item",
        "side": spec.label,
        "benchmark": item.benchmark,
        "item_id": item.item_id,
        "replicate": replicate,
        "status": status,
        "started_at": started,
        "request": {"url": redact_url(spec.base + path), "headers": endpoints.redact_headers(headers), "body": body},
        "http_status": call.http_status,
        "response": call.response,
        "error": call.error,
        "attempts": call.attempts,
        "retries": max(len(call.attempts) - 1, 0),
        "latency_s": call.latency_s,
        **parts,
    }


async def _run_items(spec: endpoints.EndpointSpec, model: str, work: list[tuple[Item, int]],
                     max_tokens: dict[str, int], log: runs.EventLog,
                     progress: Callable[[dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    headers = spec.headers()
    sem = asyncio.Semaphore(spec.concurrency)
    limits = httpx.Limits(max_connections=spec.concurrency + 2, max_keepalive_connections=spec.concurrency + 2)
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(limits=limits, timeout=spec.timeout_s) as client:

        async def one(item: Item, rep: int) -> None:
            async with sem:
                rec = await request_item(client, spec, model, item, rep, max_tokens.get(item.benchmark), headers)
            log.append(rec)  # written as it completes: a crash keeps every finished item
            out.append(rec)
            if progress:
                progress(rec)

        await asyncio.gather(*(one(it, rep) for it, rep in work))
    return out


def run_items(spec: endpoints.EndpointSpec, model: str, items: Iterable[Item], replicates: int,
              max_tokens: dict[str, int], log: runs.EventLog,
              progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Send every item ``replicates`` times (replicate-major, so a drift of the endpoint spreads over all items)."""
    items = list(items)
    work = [(it, rep) for rep in range(replicates) for it in items]
    return run_sync(_run_items(spec, model, work, max_tokens, log, progress))


def resolve_model(spec: endpoints.EndpointSpec) -> str:
    """The model name to send: the spec's, else the first the server lists."""
    if spec.model:
        return spec.model
    from offload_lab.core.errors import ServerError

    from offload_lab.core.redact import redact_url

    url = spec.base + spec.models_path()
    try:
        with httpx.Client(timeout=10.0) as c:
            resp = c.get(url, headers=spec.headers())
            resp.raise_for_status()
    except httpx.HTTPError as e:
        raise ServerError(f"endpoint {spec.label}: no OpenAI-compatible server answers at {redact_url(spec.url)} "
                          f"({type(e).__name__}: {redact_text(str(e))[:200]}); start one or pass the right "
                          "--url") from None
    data = responses.parse(responses.ModelList, resp.content, url).data
    if not data:
        raise ServerError(f"endpoint {spec.label} at {redact_url(spec.url)} lists no model; pass --model")
    return data[0].id
