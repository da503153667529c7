"""What a rehearsal predicts a campaign costs on the real pod: minutes per experiment, times the stack's price.

Each experiment's minutes are the rehearsal's own duration with the pod model's time for the parameters the
rehearsal ran replaced by its time for the campaign's: ``predicted = measured - model_seconds(rehearsed) +
model_seconds(full)`` (the same as measured when the rehearsal was not shortened). What the model does not time (the
kernel's start, building prompts, the client's own work) is the measured remainder, kept as it was here; a ratio
would have multiplied it by the shortening. The model's seconds of an experiment are
the sum, over the requests its parameters imply, of TTFT plus (reply - 1) x TPOT from the pod model, with closed-loop
streams of a level running side by side and primed caches filled one request at a time (the way
:mod:`offload_lab.load.workloads` primes them). Experiments whose work does not depend on the pod's pace (no
server: audit, capacity, cost) keep their measured time; quality, whose replies on a real model have lengths no
model here knows, is predicted as measured and marked so; boots are left out (loading times are not published).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from offload_lab.emulate.podmodel import PodModel


def _context(m: PodModel, p: dict[str, Any]) -> float:
    lengths, out = list(p.get("context_lengths") or []), int(p.get("output_tokens", 64))
    one = lambda n: m.ttft_s(n) + (out - 1) * m.tpot_ms(1, n) / 1e3  # noqa: E731
    warm = one(lengths[0]) if lengths and p.get("warmup", True) else 0.0
    return warm + int(p.get("repeats", 3)) * sum(one(n) for n in lengths)


def _request(m: PodModel, w: dict[str, Any], streams: int) -> tuple[float, float]:
    """(priming seconds at this level, seconds of one request of one stream) for a regime."""
    regime, out = w.get("regime"), int(w.get("output_tokens", 64))
    if regime in ("short", "cold_prefill"):
        n = int(w.get("prompt_tokens", 128))
        return 0.0, m.ttft_s(n) + (out - 1) * m.tpot_ms(streams, n) / 1e3
    prefix, suffix = int(w.get("prefix_tokens", 2048)), int(w.get("suffix_tokens", 32))
    per = m.ttft_s(suffix, prefix) + (out - 1) * m.tpot_ms(streams, prefix + suffix) / 1e3
    contexts = 1 if regime == "shared_prefix" else streams
    return contexts * (m.ttft_s(prefix) + m.ttft_s(1, prefix)), per


def _agent_level(m: PodModel, p: dict[str, Any], streams: int) -> float:
    c0, new = int(p.get("initial_context_tokens", 2048)), int(p.get("turn_new_tokens", 256))
    out, turns = int(p.get("output_tokens", 64)), int(p.get("turns", p.get("requests_per_stream", 1)))
    prime = streams * m.ttft_s(c0)
    level, ctx = 0.0, c0
    for _ in range(turns):
        level += m.ttft_s(new, ctx) + (out - 1) * m.tpot_ms(streams, ctx + new) / 1e3
        ctx += new + out
    return prime + level


def _concurrency(m: PodModel, p: dict[str, Any]) -> float:
    total = 0.0
    for w in (p.get("regimes") or {}).values():
        for n in p.get("streams") or []:
            prime, per = _request(m, w, int(n))
            total += prime + int(p.get("requests_per_stream", 4)) * per
    return total


def _agent_turns(m: PodModel, p: dict[str, Any]) -> float:
    return sum(_agent_level(m, p, int(n)) for n in p.get("streams") or [])


def _cached_prefix(m: PodModel, p: dict[str, Any]) -> float:
    w = {"regime": "shared_prefix", "prefix_tokens": p.get("prefix_tokens"), "suffix_tokens": p.get("suffix_tokens", 32),
         "output_tokens": p.get("output_tokens")}
    prime, per = _request(m, w, int(p.get("users", 4)))
    return prime + int(p.get("requests_per_user", 3)) * per


MODELS: dict[str, Callable[[PodModel, dict[str, Any]], float]] = {
    "context": _context, "concurrency": _concurrency, "agent_turns": _agent_turns, "cached_prefix": _cached_prefix,
}


def model_seconds(model: PodModel, kind: str, parameters: dict[str, Any]) -> float | None:
    """The pod model's seconds of work for an experiment's parameters (None: its work is not the pod's pace)."""
    f = MODELS.get(kind)
    return None if f is None else f(model, parameters)


def predict(model: PodModel, rows: list[dict[str, Any]], price: dict[str, Any] | None) -> dict[str, Any]:
    """``rows``: one per experiment with ``kind``, ``seconds`` (measured here), ``full`` and ``rehearsed`` (the
    campaign's and the rehearsal's parameters). Adds the scale, the predicted minutes and cost; returns the totals."""
    per_hour = float(price["per_hour"]) if price else None
    total_min = 0.0
    for r in rows:
        full, done = model_seconds(model, r["kind"], r["full"]), model_seconds(model, r["kind"], r["rehearsed"])
        r["model_seconds_full"], r["model_seconds_rehearsed"] = full, done
        r["scale"] = (full / done) if full and done else 1.0  # how much more pod time the full parameters take
        r["added_seconds"] = (full - done) if full is not None and done is not None else 0.0
        r["basis"] = ("pod model x rehearsal" if full and done else
                      "measured here (the work does not run at the pod's pace)" if r["kind"] != "quality" else
                      "measured here (reply lengths of the real model are not known)")
        r["predicted_minutes"] = None if r["seconds"] is None else (r["seconds"] + r["added_seconds"]) / 60.0
        r["predicted_cost"] = (None if r["predicted_minutes"] is None or per_hour is None
                               else r["predicted_minutes"] / 60.0 * per_hour)
        total_min += r["predicted_minutes"] or 0.0
    return {"predicted_minutes": total_min,
            "predicted_cost": None if per_hour is None else total_min / 60.0 * per_hour,
            "currency": price.get("currency") if price else None, "per_hour": per_hour,
            "price_source": price.get("source") if price else None,
            "left_out": "boots (the real pod's load time is not published) and the stack's install"}


def timing_error(events_path: Path) -> dict[str, Any] | None:
    """The client's TPOT error against the emulated server's send stamps, over a sweep's requests.

    Per request: ((arrival - send) of the last token - (arrival - send) of the first) / (tokens - 1), the part of
    the client's measured TPOT that is its own timing, not the server's; as ms and as a share of the TPOT."""
    import json

    import numpy as np

    if not events_path.is_file():
        return None
    errs, shares = [], []
    for line in events_path.read_text().splitlines():
        e = json.loads(line)
        t, s = e.get("token_times_ns") or [], e.get("server_sent_ns") or []
        if e.get("kind") != "request" or len(t) < 3 or len(t) != len(s) or not e.get("tpot_ms"):
            continue
        err_ms = ((t[-1] - s[-1]) - (t[0] - s[0])) / 1e6 / (len(t) - 1)
        errs.append(abs(err_ms))
        shares.append(abs(err_ms) / e["tpot_ms"])
    if not errs:
        return None
    return {"requests": len(errs), "tpot_error_ms_median": float(np.median(errs)),
            "tpot_error_ms_max": float(np.max(errs)), "tpot_error_share_median": float(np.median(shares)),
            "tpot_error_share_max": float(np.max(shares)), "file": str(events_path)}
