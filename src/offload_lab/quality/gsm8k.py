"""GSM8K scoring: one extractor, numeric comparison, format compliance reported apart.

The explicit final answer wins ("The answer is N", "#### N", ``\\boxed{N}``; the last one in the text); without
one, the last number in the text is taken and the item is marked as not following the format. A reply cut at
``max_tokens`` gets no such fallback: the last number of an unfinished derivation is not an answer. Numbers are
compared as decimals after dropping ``,``, ``$`` and ``%``, so "1,000.00" equals the gold "1000". This avoids the
lm-eval pitfalls the anchor notes (an unescaped dot in the strict regex, scoring text written after the answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_NUM = r"-?(?:\$\s?)?\d[\d,]*(?:\.\d+)?%?"
_EXPLICIT = [
    re.compile(r"answer\s+is\s*[:\s*]*\s*(" + _NUM + ")", re.IGNORECASE),
    re.compile(r"####\s*(" + _NUM + ")"),
    re.compile(r"\\boxed\{\s*(" + _NUM + r")\s*\}"),
]
_ANY = re.compile(_NUM)


@dataclass(frozen=True)
class Gsm8kScore:
    extracted: str | None
    method: str | None  # "explicit", "fallback" or None (nothing found)
    correct: bool

    @property
    def format_ok(self) -> bool:
        return self.method == "explicit"


def to_decimal(text: str) -> Decimal | None:
    cleaned = re.sub(r"[,$%\s]", "", text).rstrip(".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def extract(text: str, allow_fallback: bool = True) -> tuple[str | None, str | None]:
    """The answer string and how it was found."""
    best: tuple[int, str] | None = None
    for pat in _EXPLICIT:
        for m in pat.finditer(text):
            if best is None or m.start(1) > best[0]:
                best = (m.start(1), m.group(1))
    if best is not None:
        return best[1], "explicit"
    if allow_fallback:
        nums = _ANY.findall(text)
        if nums:
            return nums[-1], "fallback"
    return None, None


def score(text: str, gold: str, truncated: bool = False) -> Gsm8kScore:
    extracted, method = extract(text or "", allow_fallback=not truncated)
    if extracted is None:
        return Gsm8kScore(None, None, False)
    pred, want = to_decimal(extracted), to_decimal(gold)
    return Gsm8kScore(extracted, method, pred is not None and want is not None and pred == want)
