"""Workloads (the study's regimes): what each stream sends, built before the clock starts.

Every prompt is built to an exact token count against the server's ``/tokenize`` before any request is timed, and
caches a regime depends on are primed serially first, so the measured window holds only the requests it is about:

- ``short``: independent short sessions, a fresh prompt each time;
- ``cold_prefill``: long prompts salted at the start, so the prefix cache cannot help (prefill measured cold);
- ``shared_prefix``: every stream branches from one prefix of L tokens (primed once), with its own salted suffix;
- ``private_context``: every stream owns a context of L tokens (each primed), with a salted suffix per request;
- ``agent_turns``: a chat whose context starts at C0 tokens and grows by a fixed number of new tokens a turn, with
  the server's actual reply fed back, replies of R tokens, and optional think time between turns.

A request says how many of its prompt tokens the prefix cache should serve (``expect_cached_min``); the load
generator checks it against the server's per-request ``cached_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.core.bounds import MAX_SECONDS, MAX_TOKENS
from offload_lab.core.errors import InputError, ServerError
from offload_lab.load import client as load
from offload_lab.load import metrics as server_metrics
from offload_lab.load.endpoint import Endpoint
from offload_lab.load import prompts

REGIMES = ("short", "cold_prefill", "shared_prefix", "private_context", "agent_turns")
Regime = Literal["short", "cold_prefill", "shared_prefix", "private_context", "agent_turns"]


class WorkloadSpec(BaseModel):
    """Parameters of one regime. Lengths are in tokens as the server counts them."""

    model_config = ConfigDict(extra="forbid")

    regime: Regime = Field(description="short, cold_prefill, shared_prefix, private_context, agent_turns")
    output_tokens: int = Field(64, ge=2, le=MAX_TOKENS,
                               description="output tokens per request (R in agent turns)")
    prompt_tokens: int = Field(128, ge=4, le=MAX_TOKENS, description="short and cold_prefill: prompt length")
    prefix_tokens: int = Field(2048, ge=4, le=MAX_TOKENS,
                               description="shared_prefix, private_context: context length L")
    suffix_tokens: int = Field(32, ge=4, le=MAX_TOKENS, description="new tokens after the cached prefix or context")
    initial_context_tokens: int = Field(2048, ge=4, le=MAX_TOKENS,
                                        description="agent_turns: context at the first turn (C0)")
    turn_new_tokens: int = Field(256, ge=4, le=MAX_TOKENS, description="agent_turns: new user tokens each turn")
    think_time_s: float = Field(0.0, ge=0, le=MAX_SECONDS,
                                description="agent_turns: pause between a reply and the next turn")
    block_size: int | None = Field(
        None, ge=1, description="KV block size (None: read from the server's /metrics)")

    def longest_prompt(self, turns: int) -> int:
        """An upper bound on any prompt this spec sends in ``turns`` requests per stream."""
        if self.regime in ("short", "cold_prefill"):
            return self.prompt_tokens
        if self.regime in ("shared_prefix", "private_context"):
            return self.prefix_tokens + self.suffix_tokens + 2
        # A chat template adds a few tokens per message; 16 per turn is generous.
        per_turn = self.turn_new_tokens + self.output_tokens + 16
        return self.initial_context_tokens + turns * per_turn


@dataclass
class RequestSpec:
    endpoint: str
    payload: dict[str, Any]
    expected_tokens: int
    prompt_tokens: int | None = None
    expect_cached_min: int = 0
    expect_cached_max: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class PreparedWorkload:
    """Everything a level needs before its clock starts: one queue of requests per stream, or chat state."""

    spec: WorkloadSpec
    model: str
    streams: int
    requests_per_stream: int
    queues: list[list[RequestSpec]] = field(default_factory=list)
    chats: list[ChatState] = field(default_factory=list)
    primed: list[dict[str, Any]] = field(default_factory=list)

    def next_request(self, stream: int, turn: int, previous: load.RequestRecord | None) -> RequestSpec | None:
        if turn >= self.requests_per_stream:
            return None
        if self.spec.regime == "agent_turns":
            return self.chats[stream].next_request(turn, previous)
        queue = self.queues[stream]
        return queue[turn] if turn < len(queue) else None  # queues may be ragged (a fixed set of prompts)

    @property
    def think_time_s(self) -> float:
        return self.spec.think_time_s if self.spec.regime == "agent_turns" else 0.0


@dataclass
class ChatState:
    """One agent's conversation: the server's replies are appended as they come."""

    spec: WorkloadSpec
    model: str
    messages: list[dict[str, str]]
    new_turns: list[str]
    last_prompt_tokens: int | None = None

    def next_request(self, turn: int, previous: load.RequestRecord | None) -> RequestSpec:
        if previous is not None:
            # Feed back what the server actually said; a failed turn leaves the conversation as it was.
            if previous.ok:
                self.messages.append({"role": "assistant", "content": previous.text})
                # Only the previous prompt is sure to be cached: the reply comes back as text and re-encoding it
                # need not give the tokens that were generated.
                self.last_prompt_tokens = previous.prompt_tokens
        self.messages.append({"role": "user", "content": self.new_turns[turn]})
        payload = load.chat_payload(self.model, list(self.messages), self.spec.output_tokens)
        # Everything before the new user message was in the last request; a block-aligned share of it should hit.
        cached = self.last_prompt_tokens or self.spec.initial_context_tokens
        return RequestSpec(
            endpoint="/v1/chat/completions", payload=payload, expected_tokens=self.spec.output_tokens,
            expect_cached_min=max(0, cached - self.spec.block_size),
            meta={"turn": turn, "messages": len(self.messages)},
        )


def _completion(model: str, text: str, spec: WorkloadSpec, n_prompt: int, cached_min: int = 0,
                cached_max: int | None = None, **meta: Any) -> RequestSpec:
    return RequestSpec(
        endpoint="/v1/completions", payload=load.completion_payload(model, text, spec.output_tokens),
        expected_tokens=spec.output_tokens, prompt_tokens=n_prompt, expect_cached_min=cached_min,
        expect_cached_max=cached_max, meta=meta,
    )


def _joined(tok: prompts.Tokenizer, prefix: str, n_suffix: int, salt: str) -> tuple[str, int]:
    """Prefix + a salted suffix of ``n_suffix`` tokens; the join is re-counted, since BPE may merge across it."""
    suffix = prompts.exact_prompt(tok, n_suffix, salt)
    text = prefix + "\n" + suffix
    return text, tok.count(text)


def _prime(base_url: str, model: str, text: str, what: str) -> dict[str, Any]:
    rec = load.run_one(base_url, "/v1/completions", load.completion_payload(model, text, 1, ignore_eos=False))
    if not rec.ok:
        raise ServerError(f"priming {what} failed: {rec.error_kind}: {rec.error}")
    return {"what": what, "prompt_tokens": rec.prompt_tokens, "ttft_s": rec.ttft_s}


def _probe(base_url: str, model: str, text: str, want_cached: int, what: str) -> dict[str, Any]:
    """Ask again for a primed text and check the cache served it: the regime means nothing otherwise."""
    rec = load.run_one(base_url, "/v1/completions", load.completion_payload(model, text, 1, ignore_eos=False))
    ok = rec.ok and (rec.cached_tokens is None or rec.cached_tokens >= want_cached)
    return {"what": f"probe {what}", "prompt_tokens": rec.prompt_tokens, "cached_tokens": rec.cached_tokens,
            "ttft_s": rec.ttft_s, "cache_ok": ok}


def prepare(spec: WorkloadSpec, base_url: "str | Endpoint", model: str, streams: int, requests_per_stream: int,
            salt: str) -> PreparedWorkload:
    """Build every prompt of a level and prime the caches its regime needs. Runs before the clock starts."""
    if streams < 1 or requests_per_stream < 1:
        raise InputError("streams and requests per stream must be at least 1")
    base_url = Endpoint.of(base_url).base_url
    if spec.block_size is None:
        spec = spec.model_copy(update={"block_size": server_metrics.block_size(base_url)})
    out = PreparedWorkload(spec=spec, model=model, streams=streams, requests_per_stream=requests_per_stream)
    with httpx.Client(timeout=120.0) as http:
        tok = prompts.Tokenizer(base_url, model, http)
        limit = tok.max_model_len()
        need = spec.longest_prompt(requests_per_stream) + spec.output_tokens
        if limit and need > limit:
            raise InputError(
                f"regime {spec.regime} with {requests_per_stream} requests per stream needs up to {need} tokens, "
                f"over the server's max_model_len {limit}; shorten the lengths or the number of requests"
            )
        if spec.regime in ("short", "cold_prefill"):
            n = spec.prompt_tokens
            out.queues = [[_completion(model, prompts.exact_prompt(tok, n, f"{salt}/{s}/{t}"), spec, n,
                                       cached_max=spec.block_size if spec.regime == "cold_prefill" else None,
                                       stream=s, turn=t)
                           for t in range(requests_per_stream)] for s in range(streams)]
        elif spec.regime == "shared_prefix":
            prefix = prompts.exact_prompt(tok, spec.prefix_tokens, f"{salt}/prefix")
            out.primed.append(_prime(base_url, model, prefix, "shared prefix"))
            want = spec.prefix_tokens - spec.block_size
            out.primed.append(_probe(base_url, model, prefix, want, "shared prefix"))
            out.queues = []
            for s in range(streams):
                q = []
                for t in range(requests_per_stream):
                    text, n = _joined(tok, prefix, spec.suffix_tokens, f"{salt}/{s}/{t}")
                    q.append(_completion(model, text, spec, n, cached_min=want, stream=s, turn=t))
                out.queues.append(q)
        elif spec.regime == "private_context":
            want = spec.prefix_tokens - spec.block_size
            out.queues, contexts = [], []
            for s in range(streams):
                context = prompts.exact_prompt(tok, spec.prefix_tokens, f"{salt}/context/{s}")
                contexts.append(context)
                out.primed.append(_prime(base_url, model, context, f"context of stream {s}"))
                q = []
                for t in range(requests_per_stream):
                    text, n = _joined(tok, context, spec.suffix_tokens, f"{salt}/{s}/{t}")
                    q.append(_completion(model, text, spec, n, cached_min=want, stream=s, turn=t))
                out.queues.append(q)
            # Probe after all are primed: a context evicted by its neighbours would show here.
            for s, context in enumerate(contexts):
                out.primed.append(_probe(base_url, model, context, want, f"context of stream {s}"))
        else:
            out.chats = []
            for s in range(streams):
                system = prompts.exact_prompt(tok, spec.initial_context_tokens, f"{salt}/agent/{s}")
                turns = [prompts.exact_prompt(tok, spec.turn_new_tokens, f"{salt}/agent/{s}/turn/{t}")
                         for t in range(requests_per_stream)]
                chat = ChatState(spec=spec, model=model, messages=[{"role": "system", "content": system}],
                                 new_turns=turns)
                # Prime the agent's standing context, as a session that has been running would have it cached.
                payload = load.chat_payload(model, chat.messages + [{"role": "user", "content": "ok"}], 1,
                                            ignore_eos=False)
                rec = load.run_one(base_url, "/v1/chat/completions", payload)
                if not rec.ok:
                    raise ServerError(f"priming agent {s} failed: {rec.error_kind}: {rec.error}")
                out.primed.append({"what": f"agent {s}", "prompt_tokens": rec.prompt_tokens, "ttft_s": rec.ttft_s})
                out.chats.append(chat)
    return out
