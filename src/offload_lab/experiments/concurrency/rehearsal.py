"""How a rehearsal prices and checks this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

from typing import Any

from offload_lab.emulate.workload_time import PaceModel, regime_request


def pod_seconds(m: PaceModel, p: dict[str, Any]) -> float:
    total = 0.0
    for w in (p.get("regimes") or {}).values():
        for n in p.get("streams") or []:
            prime, per = regime_request(m, w, int(n))
            total += prime + int(p.get("requests_per_stream", 4)) * per
    return total


def longest_requests(p: dict[str, Any]) -> list[tuple[str, int]]:
    from offload_lab.load.workloads import WorkloadSpec

    return [(f"regime {n}", WorkloadSpec(**w).longest_prompt(p["requests_per_stream"]) + w["output_tokens"])
            for n, w in p["regimes"].items()]
