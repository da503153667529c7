"""How a rehearsal prices and checks this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offload_lab.core.runs import EVENTS, MANIFEST
from offload_lab.emulate.workload_time import PaceModel, reply_seconds


def _level(m: PaceModel, p: dict[str, Any], streams: int) -> float:
    c0, new = int(p.get("initial_context_tokens", 2048)), int(p.get("turn_new_tokens", 256))
    out, turns = int(p.get("output_tokens", 64)), int(p.get("turns", p.get("requests_per_stream", 1)))
    level, ctx = streams * m.ttft_s(c0), c0  # each stream's first context primed, one at a time
    for _ in range(turns):
        level += reply_seconds(m, new, out, streams, cached=ctx)
        ctx += new + out
    return level


def pod_seconds(m: PaceModel, p: dict[str, Any]) -> float:
    return sum(_level(m, p, int(n)) for n in p.get("streams") or [])


def longest_requests(p: dict[str, Any]) -> list[tuple[str, int]]:
    from offload_lab.load.workloads import WorkloadSpec

    spec = WorkloadSpec(regime="agent_turns", initial_context_tokens=p["initial_context_tokens"],
                        turn_new_tokens=p["turn_new_tokens"], output_tokens=p["output_tokens"])
    return [("the last turn", spec.longest_prompt(p["turns"]) + p["output_tokens"])]


def compare(model: Any, run: Path) -> list[dict[str, Any]]:
    """The emulated agent turns beside the published median and p5 tok/s per stream at each level."""
    import pandas as pd

    if not (run / "regimes.csv").is_file():
        return []
    t, a, rows = pd.read_csv(run / "regimes.csv").set_index("streams"), model.decode.agent_turns, []
    for s, med, p5 in zip(a.streams, a.median_tok_s, a.p5_tok_s):
        got = t.loc[s] if s in t.index else None
        for what, pub, col in (("median", med, "tok_s_median"), ("p5", p5, "tok_s_p5")):
            rows.append({"figure": f"agent turns, {s} stream(s): {what} tok/s", "published": pub,
                         "emulated": None if got is None else got[col], "published_source": a.provenance[:40],
                         "file": run / "regimes.csv", "as": "tok_s", "streams": 1,  # a rate per stream,
                         "tokens": int(json.loads((run / MANIFEST).read_text())["parameters"]
                                       .get("output_tokens") or 0) or None})  # over (reply - 1) TPOTs
    return rows


def timing_events(run: Path) -> Path:
    """The events whose send stamps measure the client's own TPOT error in a rehearsal."""
    return run / "agent_turns" / EVENTS  # the sweep's regime folder
