"""How a rehearsal prices and checks this experiment (found by :mod:`offload_lab.campaigns.rehearse_cost`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload_lab.emulate.workload_time import PaceModel, reply_seconds


def pod_seconds(m: PaceModel, p: dict[str, Any]) -> float:
    """Each length once to warm up (when asked), then every length ``repeats`` times, one request at a time."""
    lengths, out = list(p.get("context_lengths") or []), int(p.get("output_tokens", 64))
    warm = reply_seconds(m, lengths[0], out) if lengths and p.get("warmup", True) else 0.0
    return warm + int(p.get("repeats", 3)) * sum(reply_seconds(m, n, out) for n in lengths)


def longest_requests(p: dict[str, Any]) -> list[tuple[str, int]]:
    return [("the longest context", max(p["context_lengths"]) + p["output_tokens"])]


def compare(model: Any, run: Path) -> list[dict[str, Any]]:
    """The emulated context run beside the published TPOT-by-context and fresh-prompt TTFT it was built from, at
    the lengths run within 5% of a published one."""
    import pandas as pd

    if not (run / "summary.csv").is_file():
        return []
    t = pd.read_csv(run / "summary.csv").set_index("context_tokens")

    def near(n: int) -> int | None:
        k = int(t.index[abs(t.index - n).argmin()])
        return k if abs(k - n) <= 0.05 * n else None

    d, f, rows = model.decode, model.prefill.fresh, []
    # `as`: what kind of duration each is, for the rehearsal to convert back from an accelerated pod's time
    for what, col, pairs, kind in (("median TPOT after {k} tokens (published: {n}), ms", "tpot_median_ms",
                                    zip(d.tpot_vs_context.context_tokens, d.tpot_vs_context.tpot_ms), "tpot_ms"),
                                   ("TTFT of a fresh {k}-token prompt (published: {n}), s", "ttft_median_s",
                                    zip(f.prompt_tokens, f.ttft_s), "ttft_s")):
        for n, pub in pairs:
            if (k := near(n)) is not None:
                rows.append({"figure": what.format(k=k, n=n), "published": pub, "emulated": t.loc[k, col],
                             "published_source": "published E4/E5", "file": run / "summary.csv", "as": kind})
    return rows
