"""A calibrated token source: a small real HTTP server that streams OpenAI-style chunks at a set rate per stream.

It is the reference against which the load generator's clock is checked. Each request's first chunk is sent
``ttft_ms`` after the request arrives, then one chunk every ``1000 / rate`` ms, scheduled against absolute deadlines
so that a late wake-up does not shift the tokens after it. Every chunk carries ``x_sent_ns``, the server's
``time.monotonic_ns()`` just before the write; on the same machine the client's arrival stamps use the same clock,
so arrival minus send is the client's timing error (plus the loopback), token by token.

Two options make it a test bench for the rest of the load generator:

- ``--capacity C`` (tokens/s over all streams) shares the source like a server's batch (processor sharing): each
  stream gets ``min(rate, C / active streams)``, re-evaluated at every token, so that an open-loop sweep has a knee;
- ``--fault KIND:key=value,...`` (repeatable, or ``POST /x/faults`` at run time) injects faults into chosen requests,
  counted in arrival order from 0: ``http500`` (an error status before the stream), ``error_event`` (an OpenAI
  error event after ``after`` tokens, then ``[DONE]``), ``disconnect`` (the connection dropped after ``after``
  tokens) and ``stall`` (``stall_s`` seconds of silence after ``after`` tokens). ``start`` is the first request
  affected, ``every`` the stride, ``count`` how many at most. So the stop rule can be shown to trip where it should.

Run it as ``python -m offload_lab.load.tokensource --port 8300 --rate 50 --ttft-ms 50``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

FAULT_KINDS = ("http500", "error_event", "disconnect", "stall")


class Fault(BaseModel):
    """One injected fault and the requests (arrival order, from 0) it hits."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(pattern="^(" + "|".join(FAULT_KINDS) + ")$")
    start: int = Field(0, ge=0, description="first request affected")
    every: int = Field(1, ge=1, description="then every k-th request")
    count: int | None = Field(None, ge=1, description="at most this many requests (None: no limit)")
    after: int = Field(0, ge=0, description="tokens sent before the fault (error_event, disconnect, stall)")
    stall_s: float = Field(1.0, ge=0, description="stall: seconds of silence")

    def hits(self, index: int) -> bool:
        if index < self.start or (index - self.start) % self.every:
            return False
        return self.count is None or (index - self.start) // self.every < self.count


def parse_fault(text: str) -> Fault:
    """``KIND`` or ``KIND:key=value,...``, e.g. ``http500:start=10,every=2``."""
    kind, _, rest = text.partition(":")
    fields: dict[str, Any] = {"kind": kind}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        fields[key.strip()] = float(value) if key.strip() == "stall_s" else int(value)
    return Fault(**fields)


def stream_chunk(rid: str, model: str, text: str, completion_tokens: int, prompt_tokens: int, chat: bool,
                 finish: str | None = None, role: bool = False,
                 prompt_details: dict[str, int] | None = None) -> dict[str, Any]:
    """One OpenAI-style streamed chunk with its running usage, as vLLM sends them (also the emulated pod's):
    ``role`` puts the assistant role in a chat delta, ``prompt_details`` adds ``usage.prompt_tokens_details``."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"role": "assistant", "content": text} if role else {"content": text}
    else:
        choice["text"] = text
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if prompt_details is not None:
        usage["prompt_tokens_details"] = prompt_details
    return {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "model": model,
            "choices": [choice], "usage": usage}


class TokenSource:
    def __init__(self, rate_tok_s: float, ttft_ms: float, model: str = "token-source",
                 capacity_tok_s: float | None = None, faults: list[Fault] | None = None):
        self.interval_ns = int(1e9 / rate_tok_s)
        self.ttft_ns = int(ttft_ms * 1e6)
        self.model = model
        self.capacity = capacity_tok_s
        self.faults = list(faults or [])
        self.arrivals = 0
        self.active = 0
        self._vocab: dict[str, int] = {}
        self._words: list[str] = []

    def _fault(self, index: int) -> Fault | None:
        return next((f for f in self.faults if f.hits(index)), None)

    def _next_deadline(self, t_ns: int, start_ns: int, i: int) -> int:
        """Token i+1's send time: absolute deadlines at the set rate, or processor sharing under a capacity."""
        if self.capacity is None:
            return start_ns + (i + 1) * self.interval_ns
        return t_ns + max(self.interval_ns, int(1e9 * self.active / self.capacity))

    async def _sleep_until(self, deadline_ns: int) -> None:
        delay = (deadline_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        index, self.arrivals = self.arrivals, self.arrivals + 1
        fault = self._fault(index)
        body = await request.json()
        if fault is not None and fault.kind == "http500":
            return web.json_response({"error": {"message": f"injected fault on request {index}",
                                                "type": "InternalServerError", "code": 500}}, status=500)
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt") or json.dumps(body.get("messages") or "")
        prompt_tokens = len(self._ids(str(prompt)))
        rid = uuid.uuid4().hex
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        self.active += 1
        try:
            start = arrived + self.ttft_ns
            t = start
            for i in range(n):
                if fault is not None and i == fault.after:
                    if await self._inject(fault, request, resp, index):
                        return resp
                    if fault.kind == "stall":
                        start += int(fault.stall_s * 1e9)
                        t += int(fault.stall_s * 1e9)
                await self._sleep_until(t)
                chunk = stream_chunk(rid, self.model, f" t{i}", i + 1, prompt_tokens, chat,
                                     "length" if i == n - 1 else None)
                chunk["x_sent_ns"] = time.monotonic_ns()
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                t = self._next_deadline(t, start, i)
        finally:
            self.active -= 1
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _inject(self, fault: Fault, request: web.Request, resp: web.StreamResponse, index: int) -> bool:
        """Apply a mid-stream fault; True when the response ends here."""
        if fault.kind == "error_event":
            err = {"error": {"message": f"injected error event on request {index}", "type": "InternalServerError",
                             "code": 500}}
            await resp.write(f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode())
            await resp.write_eof()
            return True
        if fault.kind == "disconnect":
            if request.transport is not None:
                request.transport.abort()  # a reset, not a clean end: the client sees an unfinished stream
            return True
        return False  # a stall shifts the deadlines (the caller): silence, then the stream goes on

    async def set_faults(self, request: web.Request) -> web.Response:
        """``POST /x/faults {"faults": [...], "reset": true}``: replace the faults (and restart the count)."""
        body = await request.json()
        try:
            self.faults = [Fault(**f) for f in body.get("faults") or []]
        except ValidationError as e:
            return web.json_response({"error": str(e)}, status=400)
        if body.get("reset"):
            self.arrivals = 0
        return await self.get_faults(request)

    async def get_faults(self, request: web.Request) -> web.Response:
        return web.json_response({"faults": [f.model_dump() for f in self.faults], "arrivals": self.arrivals})

    # A whitespace tokenizer, so that the load generator's exact-length prompts work against the source too.
    def _ids(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self._vocab:
                self._vocab[word] = len(self._words)
                self._words.append(word)
            ids.append(self._vocab[word])
        return ids

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("prompt") if "prompt" in body else json.dumps(body.get("messages"))
        ids = self._ids(str(text))
        return web.json_response({"count": len(ids), "max_model_len": 1 << 20, "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": " ".join(self._words[i] for i in body["tokens"])})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.stream)
        app.router.add_post("/v1/chat/completions", self.stream)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_post("/x/faults", self.set_faults)
        app.router.add_get("/x/faults", self.get_faults)
        return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Stream OpenAI-style tokens at a set rate per stream (a clock check).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="delay before the first token")
    p.add_argument("--capacity", type=float, default=None,
                   help="tokens/s shared by all streams (processor sharing); default: no limit")
    p.add_argument("--fault", action="append", default=[], metavar="KIND[:key=value,...]",
                   help=f"inject a fault ({', '.join(FAULT_KINDS)}; keys start, every, count, after, stall_s)")
    args = p.parse_args(argv)
    try:
        faults = [parse_fault(f) for f in args.fault]
    except (ValidationError, ValueError) as e:
        p.error(f"--fault: {e}")
    # A collector pause between a chunk's send stamp and its write would count against the client; the source is
    # a measuring instrument, so it does without the cyclic collector (reference counting still frees memory).
    gc.disable()
    source = TokenSource(args.rate, args.ttft_ms, capacity_tok_s=args.capacity, faults=faults)
    web.run_app(source.app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
