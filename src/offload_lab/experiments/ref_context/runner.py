"""Experiment ``ref_context``: the published long-context figures (E4/E5) as data, with what follows.

From the campaign's ``published`` run: the ratio of the median TPOT after the longest prompt to that after the
shortest, and how many times longer that prompt is (K read as 1,024 tokens, as in 4K = 4,096), the per-stream decode
rates, the fresh prefill rates and the marginal rate between the two fresh prompts, and what a cached prefix does
for four users.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import runs
from offload_lab.published import transcription as published
from offload_lab.published.derive import Derivation, Derived, run_reference

EXPERIMENT = "ref_context"
K = 1024  # "4K", "128K", "256K": binary thousands, the convention of context lengths (an assumption, stated)


def _compares(pub: published.Published, key: str) -> dict[str, str]:
    # The paper's statements (configs/published/derived.yaml) are in a published run that transcribed them.
    return {"compares": key} if key in pub.figures else {}


def derive(pub: published.Published, params: dict[str, Any]) -> Derivation:
    n = pub.number
    short, long_ = n("tpot_4k_prompt_k") * K, n("tpot_256k_prompt_k") * K
    t128 = n("ttft_128k_prompt_k") * K
    p128, p260 = t128 / n("ttft_128k_s"), n("prefill_prompt_tokens") / n("prefill_ttft_s")
    f = [
        Derived("context_ratio", long_ / short, "times", "longest over shortest prompt of the TPOT figures",
                ["tpot_4k_prompt_k", "tpot_256k_prompt_k"], **_compares(pub, "context_ratio_long_short")),
        Derived("tpot_ratio", n("tpot_256k_ms") / n("tpot_4k_ms"), "ratio", "median TPOT at 256K over that at 4K",
                ["tpot_256k_ms", "tpot_4k_ms"]),
        Derived("slower_writing", n("tpot_256k_ms") / n("tpot_4k_ms") - 1, "fraction",
                "how much longer a token takes after 256K than after 4K", ["tpot_256k_ms", "tpot_4k_ms"],
                **_compares(pub, "context_slower_writing")),
        Derived("tpot_growth_per_doubling", (n("tpot_256k_ms") / n("tpot_4k_ms")) ** (1 / 6) - 1, "fraction",
                "the TPOT ratio spread evenly over the doublings from 4K to 256K", ["tpot_256k_ms", "tpot_4k_ms"]),
        Derived("decode_tok_s_4k", 1000 / n("tpot_4k_ms"), "tokens/s", "1,000 / median TPOT at 4K", ["tpot_4k_ms"]),
        Derived("decode_tok_s_256k", 1000 / n("tpot_256k_ms"), "tokens/s", "1,000 / median TPOT at 256K",
                ["tpot_256k_ms"]),
        Derived("prefill_tok_s_128k", p128, "tokens/s", "128K tokens over the fresh 128K TTFT",
                ["ttft_128k_prompt_k", "ttft_128k_s"]),
        Derived("prefill_tok_s_260k", p260, "tokens/s", "260,000 tokens over their TTFT",
                ["prefill_prompt_tokens", "prefill_ttft_s"]),
        Derived("prefill_marginal_tok_s", (n("prefill_prompt_tokens") - t128) / (n("prefill_ttft_s") - n("ttft_128k_s")),
                "tokens/s", "the tokens between the two fresh prompts over the time between their TTFTs",
                ["prefill_prompt_tokens", "prefill_ttft_s", "ttft_128k_prompt_k", "ttft_128k_s"]),
        Derived("ttft_ratio", n("prefill_ttft_s") / n("ttft_128k_s"), "ratio", "TTFT of 260,000 over that of 128K",
                ["prefill_ttft_s", "ttft_128k_s"]),
        Derived("prompt_ratio", n("prefill_prompt_tokens") / t128, "ratio", "260,000 tokens over 128K",
                ["prefill_prompt_tokens", "ttft_128k_prompt_k"]),
        Derived("shared_tpot_over_single", n("shared_256k_tpot_ms") / n("tpot_256k_ms"), "ratio",
                "median TPOT of four users on one cached 256K prefix over one request after 256K",
                ["shared_256k_tpot_ms", "tpot_256k_ms"]),
        Derived("shared_tok_s_per_user", 1000 / n("shared_256k_tpot_ms"), "tokens/s",
                "1,000 / the four users' median TPOT", ["shared_256k_tpot_ms"]),
        Derived("shared_over_bar", (1000 / n("shared_256k_tpot_ms")) / n("bar_tok_s_per_stream"), "ratio",
                "a user's rate on the cached prefix over the bar", ["shared_256k_tpot_ms", "bar_tok_s_per_stream"]),
        Derived("cached_speedup", n("prefill_ttft_s") / n("shared_256k_ttft_p95_s"), "times",
                "fresh 260,000-token TTFT over the p95 TTFT on a cached 256K prefix",
                ["prefill_ttft_s", "shared_256k_ttft_p95_s"]),
    ]
    points = pd.DataFrame({"prompt_tokens": [short, long_], "tpot_ms": [n("tpot_4k_ms"), n("tpot_256k_ms")]})
    prefill = pd.DataFrame({"prompt_tokens": [t128, n("prefill_prompt_tokens")],
                            "ttft_s": [n("ttft_128k_s"), n("prefill_ttft_s")], "tok_s": [p128, p260]})
    return Derivation(f, {"tpot_points": points, "prefill_points": prefill})


def run_experiment(run: runs.Run, data_root: Path | str, campaign: str, params: dict[str, Any]) -> dict[str, Any]:
    return run_reference(run, data_root, campaign, derive, params)
