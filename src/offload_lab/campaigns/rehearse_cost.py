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

Each experiment folder says this itself, in an optional ``rehearsal`` module (``pod_seconds``, ``longest_requests``,
``rehearsal_parameters``, ``compare``, ``BASIS``, ``NOTE``): this module finds it and names no experiment, so a new
server experiment is priced from its own folder (docs/adding-an-experiment.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload_lab.emulate.podmodel import PodModel


REHEARSAL_MODULE = "rehearsal"  # an experiment folder's module that tells a rehearsal how to price and check it


def hooks(kind: str) -> Any:
    """The experiment folder's ``rehearsal`` module (None when it declares none: its time here stands)."""
    from offload_lab.paper.discovery import experiment_module, experiment_names

    return experiment_module(kind, REHEARSAL_MODULE) if kind in experiment_names() else None


def declared(kind: str, name: str, default: Any = None) -> Any:
    """What experiment ``kind``'s folder declares for a rehearsal under ``name`` (``default`` when nothing)."""
    return getattr(hooks(kind), name, default)


def model_seconds(model: PodModel, kind: str, parameters: dict[str, Any]) -> float | None:
    """The pod model's seconds of work for an experiment's parameters (None: its work is not the pod's pace)."""
    f = declared(kind, "pod_seconds")
    return None if f is None else f(model, parameters)


def predict(model: PodModel, rows: list[dict[str, Any]], price: dict[str, Any] | None,
            served: Any = None) -> dict[str, Any]:
    """``rows``: one per experiment with ``kind``, ``seconds`` (measured here), ``full`` and ``rehearsed`` (the
    campaign's and the rehearsal's parameters). Adds the scale, the predicted minutes and cost; returns the totals.
    ``served``: the pace the emulator served what ran here at (an accelerated rehearsal's, see
    :func:`offload_lab.core.timescale.served_pace`; default the model's own): the model's seconds of the rehearsed
    parameters at that pace are what the measured seconds hold, replaced by the model's seconds of the full ones."""
    per_hour = float(price["per_hour"]) if price else None
    total_min = 0.0
    for r in rows:
        full = model_seconds(model, r["kind"], r["full"])
        done = model_seconds(served if served is not None else model, r["kind"], r["rehearsed"])
        r["model_seconds_full"], r["model_seconds_rehearsed"] = full, done
        r["scale"] = (full / done) if full and done else 1.0  # how much more pod time the full parameters take
        r["added_seconds"] = (full - done) if full is not None and done is not None else 0.0
        r["basis"] = ("pod model x rehearsal" if full and done else
                      declared(r["kind"], "BASIS", "measured here (the work does not run at the pod's pace)"))
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
