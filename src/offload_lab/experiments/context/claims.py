"""Claims of the context experiment: decode time per token and time to first token against context length."""

from __future__ import annotations

import functools

from typing import Any, Callable

from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_ratio, fmt_sig, trend_word

from offload_lab.experiments.context.tables import SUMMARY, context_summary
from offload_lab.core.runs import EVENTS, MANIFEST

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)



@claim("context.lengths", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="lengths")
def _context_lengths(src: Sources) -> int:
    """Number of context lengths measured."""
    return int(context_summary(src)["context_tokens"].nunique())


@claim("context.tokens.shortest", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="tokens")
def _context_shortest(src: Sources) -> int:
    """Shortest prompt measured, in tokens."""
    return int(context_summary(src)["context_tokens"].iloc[0])


@claim("context.tokens.longest", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="tokens")
def _context_longest(src: Sources) -> int:
    """Longest prompt measured, in tokens."""
    return int(context_summary(src)["context_tokens"].iloc[-1])


@claim("context.requests", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="requests")
def _context_requests(src: Sources) -> int:
    """Requests counted in the summary, over all context lengths."""
    return int(context_summary(src)["n"].sum())


@claim("context.requests_per_length.min", experiment="context", files=[SUMMARY], fmt=fmt_int, unit="requests")
def _context_n_min(src: Sources) -> int:
    """Fewest requests counted at any one context length (the sample behind each median)."""
    return int(context_summary(src)["n"].min())


def _request_events(src: Sources) -> list[dict[str, Any]]:
    # Older logs hold only requests and no "kind"; newer ones mark requests with kind="request".
    return [e for e in src.events(EVENTS) if e.get("kind", "request") == "request"]


@claim("context.events", experiment="context", files=[EVENTS], fmt=fmt_int, unit="requests")
def _context_events(src: Sources) -> int:
    """Requests sent, from the raw event log (failed ones included)."""
    return len(_request_events(src))


@claim("context.requests_failed", experiment="context", files=[EVENTS], fmt=fmt_int, unit="requests")
def _context_failed(src: Sources) -> int:
    """Requests in the raw event log that failed or got a prompt of the wrong length."""
    return sum(1 for e in _request_events(src) if e.get("ok") is False or e.get("prompt_length_mismatch"))


@claim("context.repeats", experiment="context", files=[MANIFEST], fmt=fmt_int, unit="repeats")
def _context_repeats(src: Sources) -> int:
    """Repeats per context length the run was asked for."""
    return int(src.parameters["repeats"])


@claim("context.output_tokens", experiment="context", files=[MANIFEST], fmt=fmt_int, unit="tokens")
def _context_output_tokens(src: Sources) -> int:
    """Output tokens asked for per request."""
    return int(src.parameters["output_tokens"])


def _at(column: str, row: int) -> Callable[[Sources], float]:
    return lambda src: float(context_summary(src)[column].iloc[row])


for _col, _unit, _fmt, _what in (
    ("tpot_median_ms", "ms", fmt_sig(3), "Median time per output token"),
    ("ttft_median_s", "s", fmt_sig(3), "Median time to first token"),
    ("tok_s_median", "tok/s", fmt_sig(3), "Median decode tokens per second of a stream"),
):
    for _end, _row in (("shortest", 0), ("longest", -1)):
        claim(
            f"context.{_col}.{_end}",
            experiment="context",
            files=[SUMMARY],
            fmt=_fmt,
            unit=_unit,
            description=f"{_what} at the {_end} context",
        )(_at(_col, _row))


def _ratio(column: str) -> Callable[[Sources], float]:
    def f(src: Sources) -> float:
        s = context_summary(src)
        first = float(s[column].iloc[0])
        if first <= 0:
            raise ValueError(f"{column} at the shortest context is {first}, no ratio")
        return float(s[column].iloc[-1]) / first

    return f


for _col, _short in (("tpot_median_ms", "TPOT"), ("ttft_median_s", "TTFT")):
    _name = _short.lower()
    claim(f"context.{_name}_ratio", experiment="context", files=[SUMMARY], fmt=fmt_ratio, unit="ratio",
          description=f"Median {_short} at the longest context over that at the shortest")(_ratio(_col))
    claim(f"context.{_name}_trend", experiment="context", files=[SUMMARY], fmt="{}", unit="",
          description=f"Direction of median {_short} from the shortest to the longest context",
          )(lambda src, _c=_col: trend_word(_ratio(_c)(src)))
