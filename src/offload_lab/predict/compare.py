"""``compare-prediction``: each figure predicted from hardware beside the one a campaign measured on that pod.

The runs read are the ones the paper reads (:func:`offload_lab.paper.claims.select_runs`: the newest ok run of each
experiment whose parameters are the campaign file's). Each figure is predicted at the campaign's own conditions (its
context lengths, streams, prefix and suffix), so a rehearsal with short contexts is compared at those contexts. A
campaign with no stack (the reference campaign) transcribes the study's pod: its figures are the study's published
ones, read from its ``published`` run, beside the calibration's predictions. A figure with no run says what is missing.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any, Callable

from offload_lab.core.errors import InputError
from offload_lab.core.runs import MANIFEST
from offload_lab.predict import study
from offload_lab.predict.catalog import Catalog, load_catalog
from offload_lab.predict.physics import Predictor
from offload_lab.predict.pod import from_stack, measured_link_efficiency

# The experiments whose runs hold a figure the physics predicts, and what each one measures.
MEASURES = {
    "agent_turns": "tok/s per stream at each stream count (regimes.csv, regime agent_turns)",
    "context": "TPOT and TTFT of one request at each context length (summary.csv)",
    "cached_prefix": "TTFT p95 and median TPOT of users on one cached prefix (summary.json)",
    "concurrency": "the KV cache's largest share used by private contexts (regimes.csv, regime private_context)",
}


def _csv(path: Path) -> Any:
    import pandas as pd

    return pd.read_csv(path)


def _row(name: str, measured: float | None, predicted: float, unit: str, run: Path | None, **extra: Any) -> dict:
    ratio = predicted / measured if measured else None
    return {"name": name, "measured": measured, "predicted": round(float(predicted), 4), "unit": unit,
            "ratio": round(ratio, 4) if ratio else None, "run": run.name if run else None, **extra}


def _agent(p: Predictor, run: Path, params: dict[str, Any]) -> list[dict]:
    f = _csv(run / "regimes.csv")
    f = f[f["regime"] == "agent_turns"] if "regime" in f else f
    ctx = int(params.get("initial_context_tokens") or study.AGENT_CONTEXT)
    return [_row(f"agent_turns_{int(r.streams)}_median_tok_s", float(r.tok_s_median), p.tok_s(int(r.streams), ctx),
                 "tok/s per stream", run) for r in f.itertuples() if r.tok_s_median == r.tok_s_median]


def _context(p: Predictor, run: Path, params: dict[str, Any]) -> list[dict]:
    out = []
    reply = int(params.get("output_tokens") or study.REPLY_TOKENS)
    for r in _csv(run / "summary.csv").itertuples():
        n = int(r.context_tokens)
        out.append(_row(f"tpot_{n}_ms", float(r.tpot_median_ms), p.step_ms(1, n + reply // 2)["tpot_ms"], "ms", run))
        out.append(_row(f"ttft_{n}_s", float(r.ttft_median_s), p.prefill_s(n)["ttft_s"], "s", run))
    return out


def _cached(p: Predictor, run: Path, params: dict[str, Any]) -> list[dict]:
    s = json.loads((run / "summary.json").read_text())
    prefix, suffix = int(params["prefix_tokens"]), int(params["suffix_tokens"])
    users = int(s.get("users") or params["users"])
    return [_row(f"cached_{prefix}_{users}_users_ttft_p95_s", s.get("ttft_p95_s"),
                 p.prefill_tail_s(suffix, prefix, users), "s", run),
            _row(f"cached_{prefix}_{users}_users_tpot_ms", s.get("tpot_median_ms"),
                 p.step_ms(users, prefix + suffix)["tpot_ms"], "ms", run)]


def _kv(p: Predictor, run: Path, params: dict[str, Any]) -> list[dict]:
    f = _csv(run / "regimes.csv")
    f = f[f["regime"].astype(str).str.startswith("private_context")]
    regimes = params.get("regimes") or {}
    cap = max(1, p.kv_capacity_tokens())
    out = []
    for r in f.itertuples():
        spec = regimes.get(r.regime, {}) if isinstance(regimes, dict) else {}
        held = int(spec.get("prefix_tokens", 0)) + int(spec.get("suffix_tokens", 0)) + int(spec.get("output_tokens", 0))
        if held and r.kv_cache_usage_max == r.kv_cache_usage_max:
            out.append(_row(f"kv_share_{r.regime}_{int(r.streams)}", float(r.kv_cache_usage_max),
                            int(r.streams) * held / cap, "share of the KV cache", run))
    return out


READERS: dict[str, Callable[[Predictor, Path, dict[str, Any]], list[dict]]] = {
    "agent_turns": _agent, "context": _context, "cached_prefix": _cached, "concurrency": _kv}


def _summary(rows: list[dict]) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    return {"compared": len(ratios), "median_abs_error": round(statistics.median(abs(x - 1) for x in ratios), 4)
            if ratios else None, "worst_factor": round(max(max(x, 1 / x) for x in ratios), 4) if ratios else None}


def _reference(data_root: Path, campaign: str, root: Path, cat: Catalog) -> dict[str, Any]:
    """A campaign without a stack: the study's published figures, from its ``published`` run, beside the
    calibration (fitted figures marked)."""
    from offload_lab.paper.claims import select_runs

    run = select_runs(data_root, campaign, ["published"], root).chosen.get("published")
    if run is None:
        raise InputError(f"campaign {campaign}: no ok 'published' run under {data_root / campaign}; run the campaign "
                         "first (offload-lab campaign run)")
    stored = {f["key"]: f for f in json.loads((run / "figures.json").read_text())}
    agent = {int(r.streams): float(r.median_tok_s) for r in _csv(run / "agent_turns.csv").itertuples()}
    key = {"ttft_260k_s": "prefill_ttft_s", "cached_256k_4_users_ttft_p95_s": "shared_256k_ttft_p95_s",
           "cached_256k_4_users_tpot_ms": "shared_256k_tpot_ms", "kv_share_five_128k": "private_128k_kv_max"}
    cal = study.calibrate(cat, root)
    cal.pop("predictor")
    rows, missing = [], []
    for f in cal["figures"]:
        if f["name"].startswith("agent_turns_"):
            measured = agent.get(int(f["name"].split("_")[2]))
        else:
            fig = stored.get(key.get(f["name"], f["name"]))
            measured = float(fig["value"]) if fig and isinstance(fig["value"], (int, float)) else None
        if measured is None:
            missing.append({"figure": f["name"], "why": f"the run {run.name} stores no such figure"})
            continue
        rows.append(_row(f["name"], measured, f["predicted"], f["unit"], run, fitted=f["fitted"],
                         measured_on=f["measured_on"], note=f.get("note", "")))
    return {"campaign": campaign, "pod": cal["pod"], "basis": "published figures (the reference campaign transcribes "
            "the study's pod); fitted ones were used to fit the free factors", "figures": rows, "missing": missing,
            "summary": _summary([r for r in rows if not r.get("fitted")]), "factors": cal["factors"]}


def _campaign(path: Path) -> tuple[str, str | None, dict[str, dict[str, Any]]]:
    """The campaign file's name, stack and each experiment's declared parameters (read here, below the campaigns
    layer, through core.inputs: bounded, UTF-8, each refusal naming the file)."""
    from offload_lab.core import inputs

    data = inputs.read_yaml(path, "campaign file")
    try:
        return (str(data["name"]), data.get("stack"),
                {str(e["experiment"]): dict(e.get("parameters") or {}) for e in data.get("experiments") or []})
    except (KeyError, TypeError, AttributeError) as e:
        raise InputError(f"campaign file {path}: not a campaign file ({e}); see configs/campaigns/") from e


def compare(campaign_file: Path | str, data_root: Path | str | None = None, root: Path | None = None,
            hardware: Path | str | None = None) -> dict[str, Any]:
    """Each predicted figure beside the one measured by the campaign's runs (see the module). A campaign never run
    but rehearsed is read from its rehearsal's runs (``<name>-rehearsal``), and says so."""
    from offload_lab.core import paths
    from offload_lab.paper.claims import select_runs

    root = Path(root) if root else paths.find_root()
    name, stack, declared = _campaign(paths.resolve_in_root(campaign_file, root))
    data = Path(data_root) if data_root else root / "data"
    runs_of = name if (data / name).is_dir() else f"{name}-rehearsal"
    if not (data / runs_of).is_dir():
        raise InputError(f"campaign {name}: no data under {data / name}; run or rehearse it first, or give --data-dir")
    cat = load_catalog(hardware)
    if stack is None:
        return _reference(data, runs_of, root, cat)
    try:
        pin = from_stack(paths.resolve_in_root(stack, root), cat, root=root)
    except InputError as e:
        raise InputError(f"campaign {name}: nothing to compare, its stack cannot be predicted: {e}") from e
    cal = study.calibrate(cat, root)
    factors = dataclasses.replace(cal.pop("predictor").factors,
                                  link_efficiency=measured_link_efficiency(cat, pin.pod.link) or 1.0)
    p = Predictor(pin.shape, pin.pod, pin.serving, factors)
    chosen = select_runs(data, runs_of, list(READERS), root).chosen
    rows: list[dict] = []
    missing: list[dict] = []
    for exp, read in READERS.items():
        if exp not in declared:
            missing.append({"figure": MEASURES[exp], "why": f"the campaign has no {exp} experiment"})
            continue
        run = chosen.get(exp)
        if run is None:
            missing.append({"figure": MEASURES[exp], "why": f"no ok {exp} run under {data / runs_of}"})
            continue
        params = {**declared[exp], **(json.loads((run / MANIFEST).read_text()).get("parameters") or {})}
        try:
            got = read(p, run, params)
        except (OSError, KeyError, ValueError) as e:
            missing.append({"figure": MEASURES[exp], "why": f"run {run.name} cannot be read for it ({e})"})
            continue
        rows += got or []
        if not got:
            missing.append({"figure": MEASURES[exp], "why": f"run {run.name} holds no such row"})
    kind = ("rehearsed (the emulated pod: a check of the emulation, not of the physics)" if runs_of != name
            else "measured")
    return {"campaign": runs_of, "pod": pin.name, "basis": f"{kind} by campaign {runs_of} on its stack {stack}",
            "figures": rows, "missing": missing, "summary": _summary(rows), "factors": dataclasses.asdict(factors)}
