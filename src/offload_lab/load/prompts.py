"""Prompts of an exact token count, checked against the server's own ``/tokenize``.

Lengths are counted by the server that will serve them, never by a client-side tokenizer: re-encoding is not a
round trip, and chat templates add tokens. A salt at the start of a prompt makes it fresh: no prefix-cache block can
match it.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

import httpx

from offload_lab.core.errors import InputError, ServerError
from offload_lab.core.redact import redact_url
from offload_lab.load import responses

# Plain words give text that tokenizes like prose; the list is fixed so prompts are reproducible from a seed.
_WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his", "her", "it", "an", "were", "are", "which", "this", "be", "or", "had", "not", "but", "have", "their", "one", "all", "been", "has", "they", "more", "when", "there", "who", "so", "some", "other", "into", "its", "time", "than", "only", "new", "two", "may", "first", "after", "also", "any", "these", "over", "most", "made", "such", "where", "many", "through", "before", "long", "years", "between", "both", "under", "same", "while", "river", "market", "engine", "memory", "expert", "layer", "token", "stream", "cache", "server", "window", "budget", "plan", "model", "signal", "value", "field", "north", "south", "garden", "letter", "number", "system", "method", "result", "table", "figure", "morning", "evening", "question", "answer", "window", "simple", "careful", "quiet", "rapid", "steady", "bright", "narrow", "gentle", "heavy", "distant", "common", "rare", "early", "late", "open", "closed"]

MAX_ADJUST = 40
# Filler grows by half each try until the server counts enough tokens; a plain word is about one token, so a server
# that still counts too few after this many tries (~130x the words) does not count tokens at all.
MAX_GROW = 12


def salt_tag(salt: str) -> str:
    """A short tag that differs from the first character for different salts: salts that share a long start (a run
    id) would otherwise give prompts whose first tokens, and at a small block size their first KV block, agree."""
    return hashlib.sha256(salt.encode()).hexdigest()[:10]


def filler_text(n_words: int, seed: str) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


@dataclass
class Tokenizer:
    """The server's tokenizer, reached over HTTP."""

    base_url: str
    model: str
    client: httpx.Client

    def _post(self, path: str, body: dict[str, Any]) -> bytes:
        url = self.base_url.rstrip("/") + path
        try:
            r = self.client.post(url, json=body)
        except httpx.HTTPError as e:
            raise ServerError(f"no answer from {redact_url(url)} ({type(e).__name__}); is the server running?") from None
        if r.status_code != 200:
            raise ServerError(f"{redact_url(url)} answered HTTP {r.status_code}: {responses.quote(r.content, 300)}")
        return r.content

    def tokenize(self, prompt: str) -> list[int]:
        url = self.base_url.rstrip("/") + "/tokenize"
        raw = self._post("/tokenize", {"model": self.model, "prompt": prompt, "add_special_tokens": True})
        return responses.parse(responses.Tokenized, raw, url).tokens

    def detokenize(self, tokens: list[int]) -> str:
        url = self.base_url.rstrip("/") + "/detokenize"
        raw = self._post("/detokenize", {"model": self.model, "tokens": tokens})
        return responses.parse(responses.Detokenized, raw, url).prompt

    def count(self, prompt: str) -> int:
        return len(self.tokenize(prompt))

    def max_model_len(self) -> int | None:
        url = self.base_url.rstrip("/") + "/tokenize"
        try:
            r = self.client.post(url, json={"model": self.model, "prompt": "x"})
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        return responses.parse(responses.Tokenized, r.content, url).max_model_len


def exact_prompt(tok: Tokenizer, n_tokens: int, salt: str) -> str:
    """Text, starting with a tag of ``salt`` (:func:`salt_tag`), that the server tokenizes to exactly ``n_tokens`` tokens.

    Start from seeded filler, cut its token list to the target and detokenize; byte-level BPE can merge across the
    cut, so re-tokenize and nudge the cut until the server's count is exact.
    """
    if n_tokens < 4:
        raise InputError(f"prompt length {n_tokens} is too short; ask for at least 4 tokens")
    words = max(16, int(n_tokens * 1.2))
    for _ in range(MAX_GROW):
        ids = tok.tokenize(f"[{salt_tag(salt)}] " + filler_text(words, seed=salt))
        if len(ids) >= n_tokens + 8:
            break
        words = int(words * 1.5) + 16
    else:
        raise ServerError(f"{redact_url(tok.base_url)}/tokenize counted {len(ids)} tokens for {words:,} words of "
                          f"text, never the {n_tokens + 8} needed: the server's /tokenize does not count tokens")
    cut = n_tokens
    for _ in range(MAX_ADJUST):
        text = tok.detokenize(ids[:cut])
        got = tok.count(text)
        if got == n_tokens:
            return text
        cut += n_tokens - got
        if cut <= 0 or cut > len(ids):
            break
    raise ServerError(f"could not build a prompt of exactly {n_tokens} tokens with the server's tokenizer")
