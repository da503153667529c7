"""Claims of the cached-prefix experiment, printed beside the study's published figures where those exist."""

from __future__ import annotations

import functools
from typing import Any

from offload_lab.experiments.cached_prefix.tables import EXPERIMENT, SUMMARY
from offload_lab.paper.claims import ClaimDef, Sources
from offload_lab.paper.claims import claim as _claim
from offload_lab.paper.formats import fmt_int, fmt_sig

SECTION: dict[str, ClaimDef] = {}
claim = functools.partial(_claim, registry=SECTION)


def _summary(src: Sources) -> dict[str, Any]:
    return src.json(SUMMARY)


def _value(key: str) -> Any:
    def f(src: Sources) -> float:
        v = _summary(src)[key]
        if v is None:
            raise ValueError(f"{SUMMARY} has no {key}: no request of the level succeeded")
        return float(v)

    return f


claim("cached_prefix.ttft_p95_s", experiment=EXPERIMENT, files=[SUMMARY], fmt=fmt_sig(3), unit="s",
      description="95th-percentile time to first token of the users on the cached prefix")(_value("ttft_p95_s"))
claim("cached_prefix.tpot_median_ms", experiment=EXPERIMENT, files=[SUMMARY], fmt=fmt_sig(3), unit="ms",
      description="Median time per output token while the users decode together")(_value("tpot_median_ms"))


@claim("cached_prefix.users", experiment=EXPERIMENT, files=[SUMMARY], fmt=fmt_int, unit="users")
def _users(src: Sources) -> int:
    """Users at once on the one prefix."""
    return int(_summary(src)["users"])


@claim("cached_prefix.prefix_tokens", experiment=EXPERIMENT, files=[SUMMARY], fmt=fmt_int, unit="tokens")
def _prefix(src: Sources) -> int:
    """Length of the shared, cached prefix."""
    return int(_summary(src)["prefix_tokens"])


@claim("cached_prefix.requests_ok", experiment=EXPERIMENT, files=[SUMMARY], fmt=fmt_int, unit="requests")
def _ok(src: Sources) -> int:
    """Requests measured inside the window with all users in flight."""
    return int(_summary(src)["requests_ok"])


@claim("cached_prefix.cache_words", experiment=EXPERIMENT, files=[SUMMARY], fmt="{}", unit="")
def _cache(src: Sources) -> str:
    """Whether every checked request found the prefix in the cache, in words."""
    s = _summary(src)
    if not s["cache_checked"]:
        return "the server reported no cached tokens to check"
    if s["cache_misses"] == 0:
        return "every request found the prefix in the cache"
    return f"{s['cache_misses']} of {s['cache_checked']} requests missed the cache"
