"""The emulated engine's state: a tokenizer whose ``/tokenize`` and usage agree, running and waiting requests, a
prefix cache of whole KV blocks with a capacity, and the counters and histograms ``/metrics`` exposes.

The tokenizer splits text into pieces of leading whitespace plus a run of non-space characters, so detokenizing is
exact concatenation (the load generator's exact-length prompts and the quality canaries' read-back both hold). Chat
messages render through a fixed template whose structure is the one those callers need: a finished conversation
adds an end mark and a new assistant header, a continuation of the last message adds neither.

The prefix cache is vLLM's, reduced to what a client can observe: a prompt's blocks are hashed as a chain, a
request is served the longest run of leading blocks already cached (never its whole prompt: its last token is
always computed), its blocks stay pinned while it runs, and unpinned blocks are evicted least recently used when
the capacity is reached. A request that does not fit waits (``num_requests_waiting``).
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

PIECE = re.compile(r"\s*\S+|\s+$")
# Histogram buckets (seconds), a subset of vLLM's: enough for means and rough tails.
BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
           160.0, 640.0)
HISTOGRAMS = {
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
}
COUNTERS = {
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "prompt_tokens_cached": "Number of cached prompt tokens (local and external).",
    "num_preemptions": "Cumulative number of preemptions from the engine.",
    "request_success": "Count of successfully processed requests.",
}


class Tokenizer:
    """Pieces of text to ids, assigned in order of first sight; ids are stable for the server's life."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for piece in PIECE.findall(text):
            i = self._ids.get(piece)
            if i is None:
                i = self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            out.append(i)
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids if 0 <= i < len(self._pieces))


def render_chat(messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                continue_final_message: bool = False) -> str:
    """The emulator's chat template (a fixed one, stated here): ``<|role|>`` then the content, each message closed by
    `` <|end|>`` except a final message being continued; ``<|assistant|>`` after a finished conversation."""
    parts = []
    for k, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        text = f"<|{m.get('role', 'user')}|>\n{content or ''}"
        last = k == len(messages) - 1
        parts.append(text if last and continue_final_message else text + " <|end|>\n")
    if add_generation_prompt and not continue_final_message:
        parts.append("<|assistant|>\n")
    return "".join(parts)


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.n += 1
        for i, edge in enumerate(BUCKETS):
            if value <= edge:
                self.counts[i] += 1


@dataclass
class Admitted:
    """A request that holds KV blocks."""

    hashes: list[int]
    extra_blocks: int = 0


class Engine:
    """What the emulated engine knows: its cache, its queue and its counters."""

    def __init__(self, block_size: int, capacity_tokens: int, max_num_seqs: int):
        self.block_size = block_size
        self.capacity_blocks = max(1, capacity_tokens // block_size)
        self.max_num_seqs = max_num_seqs
        self.cache: OrderedDict[int, int] = OrderedDict()  # block hash -> requests pinning it
        self.extra_blocks = 0  # blocks of generated tokens of running requests
        self.running = 0
        self.waiting = 0
        self.counters = {name: 0.0 for name in COUNTERS}
        self.histograms = {name: Histogram() for name in HISTOGRAMS}
        self._free = asyncio.Condition()

    # --- blocks ------------------------------------------------------------------------------------------------

    def block_hashes(self, ids: list[int]) -> list[int]:
        out, h = [], 0
        b = self.block_size
        for i in range(len(ids) // b):
            h = hash((h, tuple(ids[i * b:(i + 1) * b])))
            out.append(h)
        return out

    def _pinned(self) -> int:
        return sum(1 for refs in self.cache.values() if refs > 0)

    def usage(self) -> float:
        return min(1.0, (self._pinned() + self.extra_blocks) / self.capacity_blocks)

    def _fits(self, hashes: list[int]) -> bool:
        new = sum(1 for h in hashes if self.cache.get(h, 0) == 0)
        return self._pinned() + self.extra_blocks + new + 1 <= self.capacity_blocks

    def _evict(self) -> None:
        over = len(self.cache) + self.extra_blocks - self.capacity_blocks
        if over <= 0:
            return
        for h in [h for h, refs in self.cache.items() if refs == 0][:over]:
            del self.cache[h]

    async def admit(self, ids: list[int]) -> tuple[Admitted, int]:
        """Wait until the request fits (sequences and blocks), pin its blocks; return it and its cached tokens."""
        hashes = self.block_hashes(ids)
        async with self._free:
            self.waiting += 1
            try:
                await self._free.wait_for(lambda: self.running < self.max_num_seqs and
                                          (self.running == 0 or self._fits(hashes)))
            finally:
                self.waiting -= 1
            hit = 0
            for h in hashes:
                if h not in self.cache:
                    break
                hit += 1
            # The last prompt token is always computed (vLLM never serves a whole prompt from the cache).
            cached = min(hit, (len(ids) - 1) // self.block_size) * self.block_size
            for h in hashes:
                self.cache[h] = self.cache.get(h, 0) + 1
                self.cache.move_to_end(h)
            self.running += 1
            self._evict()
        self.counters["prefix_cache_queries"] += len(ids)
        self.counters["prefix_cache_hits"] += cached
        self.counters["prompt_tokens_cached"] += cached
        self.counters["prompt_tokens"] += len(ids)
        return Admitted(hashes), cached

    def grow(self, req: Admitted, prompt_tokens: int, generated: int) -> None:
        """Account the blocks the request's generated tokens fill."""
        full = len(req.hashes)
        need = -(-(prompt_tokens + generated) // self.block_size) - full
        if need > req.extra_blocks:
            self.extra_blocks += need - req.extra_blocks
            req.extra_blocks = need
            self._evict()

    async def release(self, req: Admitted) -> None:
        async with self._free:
            for h in req.hashes:
                if h in self.cache:
                    self.cache[h] -= 1
            self.extra_blocks -= req.extra_blocks
            self.running -= 1
            self._free.notify_all()

    # --- /metrics ------------------------------------------------------------------------------------------------

    def metrics_text(self, model: str, cache_labels: dict[str, str]) -> str:
        """vLLM's Prometheus exposition, for the names the load generator reads."""
        lab = f'model_name="{model}"'
        lines = []

        def gauge(name: str, value: float, help_: str) -> None:
            lines.extend([f"# HELP vllm:{name} {help_}", f"# TYPE vllm:{name} gauge", f"vllm:{name}{{{lab}}} {value}"])

        gauge("num_requests_running", float(self.running), "Number of requests in model execution batches.")
        gauge("num_requests_waiting", float(self.waiting), "Number of requests waiting to be processed.")
        gauge("kv_cache_usage_perc", self.usage(), "KV-cache usage. 1 means 100 percent usage.")
        for name, help_ in COUNTERS.items():
            lines.extend([f"# HELP vllm:{name} {help_}", f"# TYPE vllm:{name} counter",
                          f"vllm:{name}_total{{{lab}}} {self.counters[name]}"])
        for name, help_ in HISTOGRAMS.items():
            h = self.histograms[name]
            lines.extend([f"# HELP vllm:{name} {help_}", f"# TYPE vllm:{name} histogram"])
            for edge, count in zip(BUCKETS, h.counts):
                lines.append(f'vllm:{name}_bucket{{le="{edge}",{lab}}} {float(count)}')
            lines.append(f'vllm:{name}_bucket{{le="+Inf",{lab}}} {float(h.n)}')
            lines.append(f"vllm:{name}_count{{{lab}}} {float(h.n)}")
            lines.append(f"vllm:{name}_sum{{{lab}}} {h.total}")
        info = ",".join(f'{k}="{v}"' for k, v in sorted(cache_labels.items()))
        lines.extend(["# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
                      "# TYPE vllm:cache_config_info gauge", f"vllm:cache_config_info{{{info}}} 1.0"])
        return "\n".join(lines) + "\n"
