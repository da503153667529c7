"""The emulated pod's server: vLLM's command line and OpenAI-compatible endpoints, timed by a pod model.

Started like any server of a stack file (``python -m offload_lab.emulate.server --model DIR --host H --port P
[vLLM's flags] --pod-model FILE``). It honours ``--max-model-len``, ``--block-size``, ``--max-num-seqs``,
``--served-model-name``, ``--host`` and ``--port``, records every other flag (boot rules match on them), and first
decides its boot from the pod model's rules: out of memory at load, an initialization failure, or dying on the first
request, each printing the log lines vLLM prints so that :mod:`offload_lab.server.boots` classifies it. Ready, it
serves ``/health``, ``/v1/models``, ``/tokenize``, ``/detokenize``, ``/v1/completions``, ``/v1/chat/completions``
(streamed with continuous usage and ``cached_tokens``, or not) and ``/metrics``.

Each request waits its TTFT from the model, then sends one token per TPOT, the TPOT re-read at every token from the
number of requests running then, against absolute deadlines so that a late wake-up does not shift the tokens after it.
Time is real unless ``--time-scale S`` (a rehearsal's acceleration, :mod:`offload_lab.core.timescale`): then a TTFT
above ``--ttft-floor-s`` and a TPOT above ``--tpot-floor-ms`` are served ``floor + (w - floor) / S``, never under the
floor (no ``--tpot-floor-ms``: decode stays real); the boot log's first line and ``/metrics`` declare it. Chunks carry ``x_sent_ns`` (the server's monotonic clock just before the write),
as the calibrated token source's do, so the client's timing error can be measured against the emulated TPOT.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from offload_lab.core.timescale import TimeScale
from offload_lab.emulate.engine import Engine, Tokenizer, render_chat
from offload_lab.emulate.podmodel import PodModel, boot_rule, load_pod_model
from offload_lab.load.tokensource import stream_chunk

# Words of the emulated replies: fixed, so that every side of a comparison gets the same answer.
REPLY_WORDS = ("the", "pod", "answers", "with", "fixed", "words", "and", "no", "meaning")
HONOURED = ("model", "host", "port", "served_model_name", "max_model_len", "block_size", "max_num_seqs", "pod_model",
            "time_scale", "ttft_floor_s", "tpot_floor_ms")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, str]]:
    """The flags the emulator honours, and every flag given (snake_case -> text; a bare flag is 'true')."""
    p = argparse.ArgumentParser(description="An emulated pod: vLLM's endpoints, timed by a pod model file.")
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--pod-model", required=True, help="pod model file (configs/pods/*.yaml)")
    p.add_argument("--time-scale", type=float, default=1.0, help="serve waits above their floor this many times "
                   "faster (1: real time)")
    p.add_argument("--ttft-floor-s", type=float, default=0.0, help="TTFTs up to this are served in real time")
    p.add_argument("--tpot-floor-ms", type=float, default=None, help="TPOTs up to this are served in real time "
                   "(default: decode is never accelerated)")
    args, _ = p.parse_known_args(argv)
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            key = name.replace("-", "_")
            if eq:
                flags[key] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                vals = []
                while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    vals.append(argv[i + 1])
                    i += 1
                flags[key] = " ".join(vals)
            else:
                flags[key] = "false" if key.startswith("no_") else "true"
        i += 1
    return args, flags


def log(line: str) -> None:
    print(line, flush=True)


def check_plan(model_dir: Path, path: str, fmt: str) -> str | None:
    """What is wrong with the plan file for this model, read in ``fmt`` as the offload part reads it (None: it
    fits): the MoE layers and experts come from the model's config.json; a plan whose keys reach no MoE layer (an
    offload-lab plan handed to a patch that reads another format) leaves every expert on the GPUs."""
    from offload_lab.fit.plan_formats import read_as

    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        return f"model {model_dir} has no config.json to read the plan against"
    cfg = json.loads(cfg_path.read_text())
    first = int(cfg.get("first_k_dense_replace") or 0)
    layers = list(range(first, int(cfg["num_hidden_layers"])))
    experts = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0)
    try:
        view = read_as(path, fmt, layers, experts)
    except Exception as e:  # the reader's own refusals (not JSON, not a plan), named
        return f"plan {path} cannot be read as {fmt}: {e}"
    if view.problems:
        return f"plan {path} read as {fmt}: " + "; ".join(view.problems[:3])
    if not any(view.host_experts.values()):
        return f"plan {path} read as {fmt} keeps no expert of the model's {len(layers)} MoE layers on host"
    return None


class Pod:
    """One emulated server: the engine, the tokenizer, the pod model and the request handlers."""

    def __init__(self, model: PodModel, args: argparse.Namespace, die_on_first_request: list[str] | None = None):
        self.model = model
        self.name = args.served_model_name or args.model
        self.max_model_len = args.max_model_len or 1 << 20
        self.block_size = args.block_size
        self.engine = Engine(args.block_size, model.kv_capacity_tokens(), args.max_num_seqs)
        self.tok = Tokenizer()
        self.arrivals = 0
        self.die = die_on_first_request
        self.dead = False
        self.scale = time_scale_of(args)

    # --- helpers ---------------------------------------------------------------------------------------------

    def _prompt_ids(self, body: dict[str, Any]) -> list[int]:
        if "messages" in body:
            text = render_chat(body["messages"], bool(body.get("add_generation_prompt", True)),
                               bool(body.get("continue_final_message", False)))
            return self.tok.encode(text)
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        return self.tok.encode(prompt if isinstance(prompt, str) else " ".join(map(str, prompt)))

    def _reply_len(self, body: dict[str, Any], prompt_len: int) -> int:
        asked = body.get("max_tokens") or body.get("max_completion_tokens") or (self.max_model_len - prompt_len)
        forced = bool(body.get("ignore_eos")) or int(body.get("min_tokens") or 0) >= int(asked)
        return int(asked) if forced else min(int(asked), self.model.natural_reply_tokens)

    @staticmethod
    def _error(message: str, status: int = 400) -> web.Response:
        kind = "BadRequestError" if status == 400 else "InternalServerError"
        return web.json_response({"object": "error", "message": message, "type": kind, "param": None,
                                  "code": status}, status=status)

    def _rng(self, index: int) -> random.Random:
        return random.Random(self.model.seed * 1_000_003 + index)

    async def _die(self) -> web.Response:
        assert self.die is not None
        for line in self.die:
            log(line)
        self.dead = True
        asyncio.get_running_loop().call_later(0.5, os._exit, 1)
        return self._error("EngineCore encountered a fatal error (emulated)", 500)

    # --- generation ------------------------------------------------------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        body = await request.json()
        if self.die is not None:
            return await self._die()
        chat = request.path.endswith("/chat/completions")
        ids = self._prompt_ids(body)
        n = self._reply_len(body, len(ids))
        if len(ids) + n > self.max_model_len:
            return self._error(f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                               f"requested {len(ids) + n} tokens ({len(ids)} in the messages, {n} in the "
                               "completion). Please reduce the length of the messages or completion.")
        index, self.arrivals = self.arrivals, self.arrivals + 1
        rng = self._rng(index)
        held, cached = await self.engine.admit(ids)
        try:
            return await self._respond(request, body, chat, ids, n, cached, held, rng, arrived)
        finally:
            await self.engine.release(held)

    async def _respond(self, request: web.Request, body: dict[str, Any], chat: bool, ids: list[int], n: int,
                       cached: int, held: Any, rng: random.Random, arrived: float) -> web.StreamResponse:
        m = self.model
        ttft = m.ttft_s(len(ids) - cached, cached) * math.exp(rng.gauss(0.0, m.prefill.ttft_jitter_sigma))
        running = max(1, self.engine.running)
        factor = math.exp(rng.gauss(0.0, m.rate_sigma(running)))  # this request's pace, drawn once
        stream = bool(body.get("stream"))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        usage_details = {"cached_tokens": cached}
        resp: web.StreamResponse | None = None
        if stream:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
        deadline = arrived + self.scale.serve_ttft_s(ttft)
        pieces, first, last = [], None, None
        for i in range(n):
            await _sleep_until(deadline)
            word = " " + REPLY_WORDS[i % len(REPLY_WORDS)] if i or not chat else REPLY_WORDS[0]
            pieces.append(word)
            now = time.monotonic()
            first = first if first is not None else now
            if last is not None:
                self.engine.histograms["inter_token_latency_seconds"].observe(now - last)
            last = now
            self.engine.grow(held, len(ids), i + 1)
            if resp is not None:
                finish = ("length" if n == int(body.get("max_tokens") or n) else "stop") if i == n - 1 else None
                await resp.write(_sse(stream_chunk(rid, self.name, word, i + 1, len(ids), chat, finish, role=i == 0,
                                                   prompt_details=usage_details)))
            running = max(1, self.engine.running)
            deadline += self.scale.serve_tpot_ms(m.tpot_ms(running, len(ids)) * factor) / 1000.0
        self._observe(arrived, first, last, n)
        finish = "length" if n == int(body.get("max_tokens") or n) else "stop"
        usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n,
                 "prompt_tokens_details": usage_details}
        if resp is not None:
            await resp.write(_sse({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                                   "model": self.name, "choices": [], "usage": usage}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        text = "".join(pieces)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None}
        else:
            choice["text"] = text
        return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                                  "created": int(time.time()), "model": self.name, "choices": [choice],
                                  "usage": usage})

    def _observe(self, arrived: float, first: float | None, last: float | None, n: int) -> None:
        h, c = self.engine.histograms, self.engine.counters
        end = time.monotonic()
        if first is not None:
            h["time_to_first_token_seconds"].observe(first - arrived)
        if first is not None and last is not None and n > 1:
            h["request_time_per_output_token_seconds"].observe((last - first) / (n - 1))
        h["e2e_request_latency_seconds"].observe(end - arrived)
        c["generation_tokens"] += n
        c["request_success"] += 1

    # --- the other endpoints -----------------------------------------------------------------------------------

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        ids = self._prompt_ids(body)
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": self.tok.decode(list(body.get("tokens") or []))})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.name, "object": "model", "owned_by": "offload-lab-emulator",
             "max_model_len": self.max_model_len}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.dead else 200, text="")

    async def metrics(self, request: web.Request) -> web.Response:
        labels = {"block_size": str(self.block_size), "num_gpu_blocks": str(self.engine.capacity_blocks),
                  "enable_prefix_caching": "True", "emulated_pod_model": self.model.name,
                  "time_scale": f"{self.scale.factor:g}", "ttft_floor_s": f"{self.scale.ttft_floor_s:g}",
                  "tpot_floor_ms": "none" if self.scale.tpot_floor_ms is None else f"{self.scale.tpot_floor_ms:g}"}
        return web.Response(text=self.engine.metrics_text(self.name, labels),
                            content_type="text/plain", charset="utf-8")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        return app


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _sse(chunk: dict[str, Any]) -> bytes:
    chunk["x_sent_ns"] = time.monotonic_ns()
    return f"data: {json.dumps(chunk)}\n\n".encode()


def time_scale_of(args: argparse.Namespace) -> TimeScale:
    return TimeScale(factor=max(1.0, float(getattr(args, "time_scale", 1.0) or 1.0)),
                     ttft_floor_s=float(getattr(args, "ttft_floor_s", 0.0) or 0.0),
                     tpot_floor_ms=getattr(args, "tpot_floor_ms", None))


def time_line(scale: TimeScale) -> str:
    if not scale.accelerated:
        return "time is real (time_scale 1)"
    decode = ("decode real" if scale.tpot_floor_ms is None
              else f"TPOT above {scale.tpot_floor_ms:g} ms served floor + excess / {scale.factor:g}")
    return (f"time is ACCELERATED (time_scale {scale.factor:g}): TTFT above {scale.ttft_floor_s:g} s served floor + "
            f"excess / {scale.factor:g}; {decode}")


def startup_lines(model: PodModel, args: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    cap = model.kv_capacity_tokens()
    est = model.kv_cache.vllm_estimate_full_requests
    lines = [f"INFO [api_server.py] emulated pod: offload_lab.emulate.server, pod model {args.pod_model} "
             f"({model.name}); {time_line(time_scale_of(args))}",
             f"INFO [api_server.py] flags: {json.dumps(flags, sort_keys=True)}",
             f"INFO [kv_cache_utils.py] GPU KV cache size: {cap:,} tokens (pod model: {model.kv_cache.provenance[:60]}...)"]
    if est is not None and args.max_model_len:
        lines.append(f"INFO [kv_cache_utils.py] Maximum concurrency for {args.max_model_len:,} tokens per request: "
                     f"{est:.2f}x (as published; the emulated capacity holds {cap / args.max_model_len:.2f})")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, flags = parse_args(argv)
    try:
        model = load_pod_model(args.pod_model)
    except Exception as e:  # noqa: BLE001  (a bad pod model is an init failure the boot classifier reads)
        log(f"ERROR [api_server.py] {type(e).__name__}: {e}")
        log("RuntimeError: Engine core initialization failed. See root cause above.")
        sys.exit(1)
    for line in startup_lines(model, args, flags):
        log(line)
    rule, problem = boot_rule(model, flags, dict(os.environ), lambda p, fmt: check_plan(Path(args.model), p, fmt))
    if problem:
        log(f"ERROR [exl3.py] host-expert plan: {problem}")
    die = None
    if rule is not None:
        log(f"INFO [api_server.py] boot rule {rule.name!r} ({rule.provenance}): {rule.outcome}")
        if rule.outcome == "died_first_request":
            die = list(rule.log)
        else:
            for line in rule.log:
                log(line)
            sys.exit(1)
    elif problem is None and os.environ.get("EXL3_HOST_EXPERTS"):
        log(f"INFO [exl3.py] host-expert plan {os.environ['EXL3_HOST_EXPERTS']} fits the model")
    gc.disable()  # as the token source: a collector pause between a chunk's stamp and its write is timing error
    pod = Pod(model, args, die)
    log(f"INFO [launcher.py] Starting vLLM API server (emulated) on http://{args.host}:{args.port}")
    web.run_app(pod.app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
