"""How a rehearsal prices and checks this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offload_lab.emulate.workload_time import PaceModel, regime_request


def pod_seconds(m: PaceModel, p: dict[str, Any]) -> float:
    w = {"regime": "shared_prefix", "prefix_tokens": p.get("prefix_tokens"), "suffix_tokens": p.get("suffix_tokens", 32),
         "output_tokens": p.get("output_tokens")}
    prime, per = regime_request(m, w, int(p.get("users", 4)))
    return prime + int(p.get("requests_per_user", 3)) * per


def longest_requests(p: dict[str, Any]) -> list[tuple[str, int]]:
    # The two extra tokens are the chat template's around the suffix.
    return [("prefix, suffix and reply", p["prefix_tokens"] + p["suffix_tokens"] + 2 + p["output_tokens"])]


def compare(model: Any, run: Path) -> list[dict[str, Any]]:
    if not (run / "summary.json").is_file():
        return []
    s = json.loads((run / "summary.json").read_text())
    return [{"figure": f"TTFT p95, {s.get('users')} users on a cached {s.get('prefix_tokens')}-token prefix, s",
             "published": model.prefill.cached.ttft_s, "emulated": s.get("ttft_p95_s"),
             "published_source": "published E4/E5", "file": run / "summary.json", "as": "ttft_s"}]
