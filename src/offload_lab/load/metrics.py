"""The server's own view of a run: vLLM's Prometheus ``/metrics``, scraped before, during and after.

Counter and gauge names differ between vLLM versions (``gpu_cache_usage_perc`` became ``kv_cache_usage_perc``,
prefix-cache counters gained ``_total``), so names are matched by pattern at run time and the raw samples are kept.
What a run reports from them: the highest KV-cache usage, prefix-cache hits against queries, the most requests
running and waiting, and speculative-decoding acceptance when the server drafts.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from offload_lab.load import responses
from offload_lab.load.endpoint import MAX_METRICS_BYTES, Endpoint

# One scrape must answer within this (vLLM renders /metrics in milliseconds); a /metrics that never answers would
# otherwise hold the level's end for the whole read deadline.
SCRAPE_TIMEOUT_S = 10.0
# Counters that only ever grow: one that goes backwards between two scrapes is a restarted or lying server.
COUNTERS = ("prefix_cache_hits", "prefix_cache_queries", "spec_decode_accepted", "spec_decode_drafted",
            "prompt_tokens", "generation_tokens", "preemptions", "prompt_tokens_cached", "external_prefix_cache_hits",
            "external_prefix_cache_queries")

# Which quantity each pattern finds; the first name that matches in a scrape wins.
PATTERNS: dict[str, str] = {
    "kv_cache_usage": r"^vllm:(kv_cache_usage_perc|gpu_cache_usage_perc|cpu_cache_usage_perc)$",
    "prefix_cache_hits": r"^vllm:(gpu_)?prefix_cache_hits(_total)?$",
    "prefix_cache_queries": r"^vllm:(gpu_)?prefix_cache_queries(_total)?$",
    "requests_running": r"^vllm:num_requests_running$",
    "requests_waiting": r"^vllm:num_requests_waiting$",
    "spec_decode_accepted": r"^vllm:spec_decode_num_accepted_tokens(_total)?$",
    "spec_decode_drafted": r"^vllm:spec_decode_num_draft_tokens(_total)?$",
    "prompt_tokens": r"^vllm:prompt_tokens(_total)?$",
    "generation_tokens": r"^vllm:generation_tokens(_total)?$",
    "preemptions": r"^vllm:num_preemptions(_total)?$",
    # Prompt tokens served from a cache (any tier), and the offload connector's own hits: what `compare` checks.
    "prompt_tokens_cached": r"^vllm:prompt_tokens_cached(_total)?$",
    "external_prefix_cache_hits": r"^vllm:external_prefix_cache_hits(_total)?$",
    "external_prefix_cache_queries": r"^vllm:external_prefix_cache_queries(_total)?$",
}
# Histograms whose sums and counts let a run be compared with the server's own timing.
HISTOGRAMS: dict[str, str] = {
    "ttft": r"^vllm:time_to_first_token_seconds$",
    "itl": r"^vllm:(inter_token_latency_seconds|time_per_output_token_seconds)$",
    "tpot": r"^vllm:request_time_per_output_token_seconds$",
    "e2e": r"^vllm:e2e_request_latency_seconds$",
}


# A sample's value as the exposition format writes it: ASCII digits only (Python's float() also takes "٥" and "²"
# forms of digits, which no exporter writes), or NaN / +Inf / -Inf.
_VALUE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN", re.ASCII)
# Counters and gauges a server reports stay far below this; a value above it is a server inventing numbers.
MAX_SAMPLE = 1e18


def _check_values(text: str) -> None:
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rest = line.rpartition("}")[2] if "}" in line else line.partition(" ")[2]
        value = rest.split()[0] if rest.split() else ""
        if not _VALUE.fullmatch(value):
            raise ValueError(f"line {n}: value {value[:30]!r} is not a number in ASCII digits")


def parse(text: str, nonfinite: list[str] | None = None) -> dict[str, float]:
    """Flatten a Prometheus text exposition into {sample name with labels: value}, summed over label sets that
    differ only by the model name (one server, one model). A NaN or infinite sample is left out (no figure is made
    of it, its name added to ``nonfinite`` when given); a finite one beyond :data:`MAX_SAMPLE` is an error."""
    _check_values(text)
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = float(s.value)
            if not math.isfinite(value):
                if nonfinite is not None:
                    nonfinite.append(f"{s.name} = {s.value}")
                continue
            if abs(value) > MAX_SAMPLE:
                raise ValueError(f"{s.name} = {value:g}, beyond any counter a server keeps")
            labels = {k: v for k, v in s.labels.items() if k not in ("model_name", "engine")}
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else "")
            out[key] = out.get(key, 0.0) + value
    return out


def parse_checked(text: str, url: str, nonfinite: list[str] | None = None) -> dict[str, float]:
    """:func:`parse`, with text that is not Prometheus exposition a :class:`responses.BadResponse` (exit 3)."""
    try:
        return parse(text, nonfinite)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as e:
        raise responses.bad(url, "body", f"Prometheus text exposition ({str(e)[:60]})", text) from None


_PATTERNS = {name: re.compile(p) for name, p in PATTERNS.items()}
_HISTOGRAMS = {name: re.compile(p.rstrip("$")) for name, p in HISTOGRAMS.items()}


def pick(samples: dict[str, float]) -> dict[str, float | None]:
    """The named quantities of :data:`PATTERNS` from one scrape (None where the server has no such metric)."""
    out: dict[str, float | None] = {}
    for name, rx in _PATTERNS.items():
        out[name] = next((v for k, v in samples.items() if rx.match(k)), None)
    for name, rx in _HISTOGRAMS.items():
        for suffix in ("_sum", "_count"):
            key = next((k for k in samples if rx.match(k) and k.endswith(suffix) and "{" not in k), None)
            out[f"{name}{suffix}"] = samples[key] if key else None
    return out


@dataclass
class Scraper:
    """Scrape ``/metrics`` every ``interval_s`` while a run goes on; keeps every sample it took.

    During a run it only keeps the raw text: parsing runs on the event loop that stamps tokens, so it waits until
    :meth:`stop`, like the streams' own parsing."""

    base_url: str
    interval_s: float = 1.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # scrapes that could not be read, and why
    _raw: list[tuple[str, int, str]] = field(default_factory=list)
    _task: asyncio.Task | None = None
    _stop: asyncio.Event | None = None

    async def scrape(self, client: aiohttp.ClientSession, phase: str) -> None:
        url = self.base_url.rstrip("/") + "/metrics"
        try:
            async with client.get(url, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S),
                                  allow_redirects=False) as r:
                if r.status != 200:
                    return
                raw = await r.content.read(MAX_METRICS_BYTES + 1)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            self.problems.append(f"{phase}: no answer within {SCRAPE_TIMEOUT_S:g} s ({type(e).__name__})")
            return
        if len(raw) > MAX_METRICS_BYTES:
            self.problems.append(f"{phase}: more than {MAX_METRICS_BYTES:,} bytes; not read")
            return
        self._raw.append((phase, time.monotonic_ns(), raw.decode("utf-8", errors="replace")))

    async def _loop(self, client: aiohttp.ClientSession) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            await self.scrape(client, "during")
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                pass

    async def start(self, client: aiohttp.ClientSession, during: bool = True) -> None:
        """Scrape once now, then every ``interval_s`` while the run goes on (``during``), else only at the end."""
        await self.scrape(client, "before")
        self._stop = asyncio.Event()
        if during and self.interval_s > 0:
            self._task = asyncio.create_task(self._loop(client))

    async def stop(self, client: aiohttp.ClientSession) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=SCRAPE_TIMEOUT_S + 1)
            except asyncio.TimeoutError:
                self.problems.append("during: a scrape did not end; cancelled")
        await self.scrape(client, "after")
        self._parse_raw()

    def _parse_raw(self) -> None:
        url = self.base_url.rstrip("/") + "/metrics"
        self.samples = []
        for phase, t, text in self._raw:
            nonfinite: list[str] = []
            try:
                self.samples.append({"phase": phase, "t_ns": t, **pick(parse_checked(text, url, nonfinite))})
                # Left out of the figures, and said: a gauge the run reports (KV usage, queue) that read NaN is a
                # hole in the server's view, not a zero.
                watched = [x for x in nonfinite if any(rx.match(x.split(" = ")[0])
                                                       for rx in (*_PATTERNS.values(), *_HISTOGRAMS.values()))]
                if watched:
                    self.problems.append(f"{phase}: not a finite number, left out: {', '.join(watched[:3])}")
            except responses.BadResponse as e:
                # The server's own view is a side figure: the run keeps its requests, the reason is recorded.
                self.problems.append(f"{phase}: {e}")


def _delta(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return values[-1] - values[0] if len(values) >= 2 else None


def _max(samples: list[dict[str, Any]], key: str) -> float | None:
    values = [s[key] for s in samples if s.get(key) is not None]
    return max(values) if values else None


def counters_backwards(samples: list[dict[str, Any]]) -> list[str]:
    """Counters that went down between two scrapes: their differences over the run mean nothing."""
    out = []
    for key in (*COUNTERS, *(f"{h}_{s}" for h in HISTOGRAMS for s in ("sum", "count"))):
        values = [s[key] for s in samples if s.get(key) is not None]
        drops = [(a, b) for a, b in zip(values, values[1:]) if b < a]
        if drops:
            out.append(f"{key} went from {drops[0][0]:g} down to {drops[0][1]:g}")
    return out


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What the server saw over a run: maxima of gauges, differences of counters and histogram means. Counters that
    went backwards (a restarted or lying server) are named under ``flags`` and their differences left out."""
    backwards = counters_backwards(samples)
    if backwards:
        bad_keys = {b.split(" ", 1)[0] for b in backwards}
        samples = [{k: (None if k in bad_keys else v) for k, v in s.items()} for s in samples]
    hits, queries = _delta(samples, "prefix_cache_hits"), _delta(samples, "prefix_cache_queries")
    accepted, drafted = _delta(samples, "spec_decode_accepted"), _delta(samples, "spec_decode_drafted")
    out: dict[str, Any] = {
        "scrapes": len(samples),
        "kv_cache_usage_max": _max(samples, "kv_cache_usage"),
        "requests_running_max": _max(samples, "requests_running"),
        "requests_waiting_max": _max(samples, "requests_waiting"),
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": (hits / queries) if hits is not None and queries else None,
        "spec_decode_acceptance": (accepted / drafted) if accepted is not None and drafted else None,
        "generation_tokens": _delta(samples, "generation_tokens"),
        "prompt_tokens_cached": _delta(samples, "prompt_tokens_cached"),
        "external_prefix_cache_hits": _delta(samples, "external_prefix_cache_hits"),
        "preemptions": _delta(samples, "preemptions"),
        "flags": backwards,
    }
    for name in HISTOGRAMS:
        total, count = _delta(samples, f"{name}_sum"), _delta(samples, f"{name}_count")
        out[f"server_{name}_mean_s"] = (total / count) if total is not None and count else None
        out[f"server_{name}_count"] = count
    return out


def cache_config(base_url: "str | Endpoint", timeout_s: float = 10.0) -> dict[str, str]:
    """The labels of vLLM's ``cache_config_info`` gauge (block size, number of KV blocks...); {} if absent (a
    server without /metrics, or one whose /metrics is not Prometheus text)."""
    endpoint = Endpoint.of(base_url)
    text = endpoint.metrics_text(timeout_s)
    if not text:
        return {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name.endswith("cache_config_info"):
                for s in family.samples:
                    return {str(k)[:100]: str(v)[:100] for k, v in s.labels.items()}
    except (ValueError, TypeError, IndexError, KeyError):
        return {}
    return {}


def block_size(base_url: "str | Endpoint", default: int = 16) -> int:
    """The server's KV block size: prefix-cache hits come in whole blocks (128 on vLLM's CPU backend)."""
    value = cache_config(base_url).get("block_size")
    # isascii: "²".isdigit() is True and int("²") fails; a block of more than 2**20 tokens is no KV block.
    if value and value.isascii() and value.isdigit() and 0 < int(value) <= 1 << 20:
        return int(value)
    return default
