"""A calibrated token source: a small real HTTP server that streams OpenAI-style chunks at a set rate per stream.

It is the reference against which the load generator's clock is checked. Each request's first chunk is sent
``ttft_ms`` after the request arrives, then one chunk every ``1000 / rate`` ms, scheduled against absolute deadlines
so that a late wake-up does not shift the tokens after it. Every chunk carries ``x_sent_ns``, the server's
``time.monotonic_ns()`` just before the write; on the same machine the client's arrival stamps use the same clock,
so arrival minus send is the client's timing error (plus the loopback), token by token.

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


def _chunk(rid: str, model: str, text: str, completion_tokens: int, prompt_tokens: int, chat: bool,
           finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    return {
        "id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class TokenSource:
    def __init__(self, rate_tok_s: float, ttft_ms: float, model: str = "token-source"):
        self.interval_ns = int(1e9 / rate_tok_s)
        self.ttft_ns = int(ttft_ms * 1e6)
        self.model = model
        self._vocab: dict[str, int] = {}
        self._words: list[str] = []

    async def _sleep_until(self, deadline_ns: int) -> None:
        delay = (deadline_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic_ns()
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt") or json.dumps(body.get("messages") or "")
        prompt_tokens = len(self._ids(str(prompt)))
        rid = uuid.uuid4().hex
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i in range(n):
            await self._sleep_until(arrived + self.ttft_ns + i * self.interval_ns)
            chunk = _chunk(rid, self.model, f" t{i}", i + 1, prompt_tokens, chat, "length" if i == n - 1 else None)
            chunk["x_sent_ns"] = time.monotonic_ns()
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

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
        return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Stream OpenAI-style tokens at a set rate per stream (a clock check).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="delay before the first token")
    args = p.parse_args(argv)
    # A collector pause between a chunk's send stamp and its write would count against the client; the source is
    # a measuring instrument, so it does without the cyclic collector (reference counting still frees memory).
    gc.disable()
    web.run_app(TokenSource(args.rate, args.ttft_ms).app(), host=args.host, port=args.port, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
