"""The inputs of the seat and cost analysis from a campaign's own measured runs (``source: measured``).

Each input comes from a file, and the file is recorded with its run:

=========================  ===========================================================================================
streams kept at the bar    the newest ok ``agent_turns`` run (or ``concurrency`` run, one regime): the largest stream
                           count whose median per-stream tok/s, and every smaller count's, is at least the bar raised by
                           the margin (``seats.capacity.streams_at_bar``, the published rule); bar and margin are that
                           run's own parameters
pod output at that load    the same run's raw events at that stream count: output tokens that arrived inside the
                           level's measurement window over the window's length (every stream's tokens, prefill gaps
                           included: what the pod delivered, not a per-stream rate times streams)
one agent turn             the run's reply length over the bar
prefill rate               the newest ok ``context`` run: its longest fresh prompt over its median TTFT
pod price                  the ``price`` block of the stack file the streams run ran against (its manifest), or of
                           ``price_stack`` when the campaign names one (the embedded stack has no price of its own)
seat price, α, teams       the campaign file (``seat_price_per_month`` with ``seat_price_source``, ``seat_alphas``,
                           ``team_sizes``)
usage profile              a file: the project's YAML profile or a ccusage export (:mod:`offload_lab.seats.usage_export`)
=========================  ===========================================================================================

"Newest ok run" is the run the paper reads: the newest ``ok`` run whose parameters are those the campaign file declares
(:mod:`offload_lab.paper.selection`), so the section and the sections it draws on cite the same runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from offload_lab.core import paths, runs, timescale
from offload_lab.core.errors import InputError
from offload_lab.load.bar import bar_of, margin_of
from offload_lab.published import transcription as published
from offload_lab.paper import selection
from offload_lab.seats import capacity
from offload_lab.seats.profile import UsageProfile, profile_timing
from offload_lab.seats.usage_export import load_usage
from offload_lab.server.stack import load_stack
from offload_lab.core.runs import EVENTS

REGIMES = "regimes.csv"
CONTEXT_SUMMARY = "summary.csv"
# The published figures set beside the measured ones (figures.json keys of the published run / transcription).
BESIDE = ("streams_per_pod", "provisioning_streams", "agents_4_total_tok_s", "agents_4_streams", "prefill_prompt_tokens",
          "prefill_ttft_s", "pod_eur_per_hour", "seat_eur_per_month", "bar_tok_s_per_stream")


def pick_run(data_root: Path, campaign: str, experiment: str, root: Path) -> Path:
    """The run of ``experiment`` the paper reads for ``campaign``, verified against its manifest."""
    sel = selection.select(data_root, campaign, {experiment}, root)
    run_dir = sel.chosen.get(experiment)
    if run_dir is None:
        why = "; ".join(f"{s['run_id']}: {s['reason']}" for s in sel.skipped if s["experiment"] == experiment)
        raise InputError(f"campaign {campaign} has no ok run of experiment {experiment!r} under {data_root}"
                         f"{' (' + why + ')' if why else ''}: run `offload-lab campaign run` with `--only "
                         f"{experiment}` first, or name another experiment in the capacity/cost parameters")
    problems = runs.verify_run(run_dir)
    if problems:
        raise InputError(f"run {run_dir} does not match its manifest:\n  " + "\n  ".join(problems[:5]))
    return Path(run_dir)


def file_ref(run_dir: Path, rel: str, root: Path) -> dict[str, Any]:
    """Where an input was read: run id, run directory, file and its sha256 (as the run's manifest lists it)."""
    manifest = runs.load_manifest(run_dir)
    listed = (manifest.get("files") or {}).get(rel)
    if listed is None:
        raise InputError(f"run {run_dir} lists no file {rel} in its manifest; it is not a run this input can come from")
    return {"experiment": manifest.get("experiment"), "run_id": manifest.get("run_id"),
            "path": paths.relative_to_root(run_dir, root), "file": rel, "sha256": listed["sha256"]}


def _regime_of(manifest: dict[str, Any], streams_from: str, regime: str | None) -> tuple[str, int]:
    """The regime whose sweep sets the streams, and its reply length in tokens (from the run's parameters)."""
    p = manifest.get("parameters") or {}
    if streams_from == "agent_turns":
        return "agent_turns", int(p["output_tokens"])
    regimes = p.get("regimes") or {}
    if regime not in regimes:
        raise InputError(f"the concurrency run {manifest.get('run_id')} has no regime {regime!r} (it has "
                         f"{sorted(regimes)}); set `regime` in the capacity/cost parameters")
    return str(regime), int(regimes[regime]["output_tokens"])


def level_output_tok_s(events: list[dict[str, Any]], level: int) -> dict[str, Any]:
    """Output tokens of every stream that arrived inside a level's window, over the window's length."""
    lv = next((e for e in events if e.get("kind") == "level" and e.get("level") == level), None)
    if lv is None or not lv.get("window_ns"):
        raise InputError(f"the events hold no measurement window for {level} stream(s)")
    start, end = lv["window_ns"]
    if not end > start:
        raise InputError(f"the measurement window of {level} stream(s) is empty ({start} to {end} ns)")
    tokens = 0
    requests = 0
    for e in events:
        if e.get("kind") != "request" or e.get("level") != level or not e.get("ok"):
            continue
        times = e.get("token_times_ns") or []
        counts = e.get("chunk_tokens") or [1] * len(times)
        inside = [c for t, c in zip(times, counts) if start <= t <= end]
        tokens += sum(int(c) for c in inside)
        requests += 1 if inside else 0
    seconds = (end - start) / 1e9
    return {"tok_s": tokens / seconds, "tokens": tokens, "window_s": seconds, "requests": requests,
            "achieved_concurrency": lv.get("achieved_concurrency")}


def streams_and_output(run_dir: Path, streams_from: str, regime: str | None, root: Path,
                       prov: dict[str, Any]) -> dict[str, Any]:
    """Streams kept at the bar, the pod's output at that load, the bar and one turn, from one sweep run."""
    manifest = runs.load_manifest(run_dir)
    name, reply_tokens = _regime_of(manifest, streams_from, regime)
    params = manifest.get("parameters") or {}
    bar, margin = bar_of(params), margin_of(params)
    table = pd.read_csv(run_dir / REGIMES)
    table = table[table["regime"] == name].sort_values("streams")
    scale = timescale.of_manifest(manifest)  # a rehearsal's accelerated pod: its rates back in pod time, once
    if scale.accelerated:  # a request's tok/s is its reply's tokens over (tokens - 1) TPOTs
        served = table["tok_s_median"].tolist()
        table = table.assign(tok_s_median=[scale.to_pod(v, "tok_s", tokens=reply_tokens) for v in served])
        back = dict(zip(table["streams"], (p / s if s else 1.0 for p, s in zip(table["tok_s_median"], served))))
    if table.empty:
        raise InputError(f"{run_dir / REGIMES} has no rows of regime {name}")
    streams = capacity.streams_at_bar(table["streams"].tolist(), table["tok_s_median"].tolist(), bar, margin)
    prov["streams_per_pod"] = {**file_ref(run_dir, REGIMES, root), "regime": name, "column": "tok_s_median",
                               "rule": "the most streams whose median per-stream tok/s, and every smaller count's, "
                                       "is ≥ bar × (1 + margin)", "bar_tok_s": bar, "margin": margin}
    if streams == 0:
        raise InputError(f"in {run_dir}, not even one stream of {name} kept a median of {bar * (1 + margin):g} tok/s "
                         f"(the bar {bar:g} with the margin {margin:g}): a pod of this stack serves no seat")
    events_rel = f"{name}/{EVENTS}"
    out = level_output_tok_s(runs.read_events(run_dir / events_rel), streams)
    if scale.accelerated:  # the level's output at the ratio its median stream's rate converts by
        out = {**out, "tok_s": out["tok_s"] * back[streams], "tok_s_measured": out["tok_s"],
               "time_scale": scale.record(), "converted": "x (pod / measured) median tok/s per stream at the level"}
    prov["pod_output_tok_s"] = {**file_ref(run_dir, events_rel, root), "level": streams,
                                "formula": "output tokens arriving inside the level's window / the window's seconds",
                                **{k: v for k, v in out.items() if k != "tok_s"}}
    prov["bar_tok_s"] = {"experiment": manifest.get("experiment"), "run_id": manifest.get("run_id"),
                         "path": paths.relative_to_root(run_dir, root), "file": runs.MANIFEST,
                         "field": "parameters.bar_tok_s", "margin_field": "parameters.margin"}
    prov["turn_seconds"] = {"formula": "reply tokens / bar", "reply_tokens": reply_tokens,
                            "from": f"parameters of run {manifest.get('run_id')}"}
    return {"streams": streams, "pod_output_tok_s": out["tok_s"], "bar": bar, "margin": margin,
            "turn_seconds": reply_tokens / bar, "stack": manifest.get("stack") or {}, "table": table}


def prefill_rate(run_dir: Path, root: Path, prov: dict[str, Any]) -> float:
    """The context run's longest fresh prompt over its median TTFT."""
    summary = pd.read_csv(run_dir / CONTEXT_SUMMARY)
    summary = summary[(summary["n"] > 0) & (summary["ttft_median_s"] > 0)].sort_values("context_tokens")
    if summary.empty:
        raise InputError(f"{run_dir / CONTEXT_SUMMARY} has no length with a successful request to time prefill by")
    row = summary.iloc[-1]
    # a rehearsal's accelerated pod: the TTFT back in pod time, once, from the run's own record
    scale = timescale.of_manifest(runs.load_manifest(run_dir))
    ttft = scale.pod_ttft_s(float(row["ttft_median_s"]))
    prov["prefill_tok_s"] = {**file_ref(run_dir, CONTEXT_SUMMARY, root),
                             "formula": "context_tokens / ttft_median_s at the longest fresh prompt",
                             "context_tokens": int(row["context_tokens"]), "ttft_median_s": ttft,
                             **({"ttft_median_s_measured": float(row["ttft_median_s"]),
                                 "time_scale": scale.record()} if scale.accelerated else {})}
    return float(row["context_tokens"]) / ttft


def pod_price(stack_record: dict[str, Any], price_stack: str | None, seat_currency: str, root: Path,
              prov: dict[str, Any]) -> float | None:
    """The pod's price an hour, in the seat's currency, from a stack file's ``price``; None, with the reason recorded, when there is
    none or its currency is not the seat's (cost then refuses to run, naming it)."""
    if price_stack is not None:
        file = paths.resolve_in_root(price_stack, root)
        price = stack_price(file, root)
        where = {"stack_file": price_stack, "sha256": runs.sha256_file(file),
                 "why": "named by the campaign (price_stack): the measured stack's file has no price of its own"
                 if not (stack_record.get("spec") or {}).get("price") else "named by the campaign (price_stack)"}
    else:
        price = (stack_record.get("spec") or {}).get("price")
        where = {"stack_file": paths.relative_to_root(stack_record.get("file") or "?", root),
                 "sha256": stack_record.get("sha256"), "why": "the stack the streams run ran against (its manifest)"}
    if not price:
        prov["pod_price_per_hour"] = {**where, "missing": "the stack file has no price block"}
        return None
    prov["pod_price_per_hour"] = {**where, "price": price}
    if price["currency"] != seat_currency:
        prov["pod_price_per_hour"]["missing"] = (f"the pod is priced in {price['currency']}, the seat in {seat_currency}; "
                                               "no exchange rate is recorded")
        return None
    return float(price["per_hour"])


def stack_price(file: Path, root: Path) -> dict[str, Any] | None:
    """A stack file's ``price`` block (its own, else the one of the file it extends), as the stack loader reads it."""
    if not file.is_file():
        raise InputError(f"price_stack: stack file {file} does not exist")
    price = load_stack(file, root=root).spec.price
    return price.model_dump() if price else None


def published_beside(data_root: Path, transcription: str, root: Path) -> dict[str, Any]:
    """The published figures to print beside the measured ones: the reference campaign's published run when there
    is one, else the transcription itself (read through the published experiment's loader)."""
    try:
        pub = published.read_published(data_root, "reference")
    except InputError:
        pub = None
    out: dict[str, Any] = {}
    if pub is not None:
        for key in BESIDE:
            if key in pub.figures and pub.figures[key].get("value") is not None:
                out[key] = {"value": pub.figures[key]["value"], **pub.source_ref(published.FIGURES, key)}
        return {"from": "the reference campaign's published run", "run_id": pub.manifest.get("run_id"),
                "figures": out}
    path = paths.resolve_in_root(transcription, root)
    t = published.load_transcription(path)
    sha = runs.sha256_file(path)
    for f in t.figures:
        if f.key in BESIDE and f.value is not None:
            out[f.key] = {"value": f.value, "file": transcription, "sha256": sha, "key": f.key, "section": f.section,
                          "published": f.published}
    return {"from": f"the transcription {transcription}", "source": t.source, "figures": out}


def split_rate(beside: dict[str, Any], profile: UsageProfile, prov: dict[str, Any]) -> float | None:
    """The prefill rate an inferred split is inferred at: the study's longest fresh prompt over its TTFT, which is
    the rate its published hours were timed at; None when the profile gives its split."""
    if profile.tokens.split_given:
        return None
    figs = beside["figures"]
    if "prefill_prompt_tokens" not in figs or "prefill_ttft_s" not in figs:
        raise InputError(f"profile {profile.name} gives a total, not a split: it is inferred at the rate its source "
                         "timed its hours at, and the published figures hold no prefill_prompt_tokens/prefill_ttft_s")
    prov["split_prefill_tok_s"] = {"formula": "prefill_prompt_tokens / prefill_ttft_s (published)",
                                   "why": "the split is the developer's week; it is inferred at the rate the source "
                                          "timed its published hours at, then timed at this pod's own prefill rate",
                                   "figures": {k: figs[k] for k in ("prefill_prompt_tokens", "prefill_ttft_s")}}
    return float(figs["prefill_prompt_tokens"]["value"]) / float(figs["prefill_ttft_s"]["value"])


def resolve_profile(name: str, root: Path) -> Path:
    """A profile named by path, or by name in ``configs/profiles/``."""
    p = Path(name)
    if p.suffix or "/" in name:
        return paths.resolve_in_root(p, root)
    return root / "configs" / "profiles" / f"{name}.yaml"


def gather_measured(params: Any, data_root: Path | str, campaign: str) -> dict[str, Any]:
    """Every input of :class:`~offload_lab.published.study_inputs.StudyInputs` from the campaign's runs, as
    keyword arguments, with ``provenance``."""
    root = paths.find_root()
    data_root = Path(data_root)
    prov: dict[str, Any] = {"source": "measured"}
    sweep_exp = params.streams_experiment or params.streams_from
    sweep_dir = pick_run(data_root, campaign, sweep_exp, root)
    context_dir = pick_run(data_root, campaign, params.prefill_experiment, root)
    prov["runs"] = {"streams": {"experiment": sweep_exp, "run_id": sweep_dir.name,
                                "path": paths.relative_to_root(sweep_dir, root)},
                    "prefill": {"experiment": params.prefill_experiment, "run_id": context_dir.name,
                                "path": paths.relative_to_root(context_dir, root)}}
    sweep = streams_and_output(sweep_dir, params.streams_from, params.regime, root, prov)
    prefill = prefill_rate(context_dir, root, prov)
    price = pod_price(sweep["stack"], params.price_stack, params.seat_currency, root, prov)
    beside = published_beside(data_root, params.transcription, root)
    profile, where = load_usage(resolve_profile(params.profile, root), params.window_hours, params.sessions)
    prov["profile"] = {**where, "file": paths.relative_to_root(where["file"], root),
                       "provenance": profile.provenance.model_dump()}
    split_at = split_rate(beside, profile, prov)
    timing = profile_timing(profile, stream_tok_s=sweep["bar"], prefill_tok_s=prefill, split_prefill_tok_s=split_at)
    prov["timing"] = {"profile": prov["profile"]["file"], "stream_tok_s": "bar_tok_s", "prefill_tok_s": "prefill_tok_s",
                      "split_prefill_tok_s": split_at}
    q = _q(params.q_source, profile, timing, prov)
    prov["seat_price_per_month"] = {"from": "the campaign file", "source": params.seat_price_source,
                                  "currency": params.seat_currency}
    prov["alphas"] = prov["team_sizes"] = {"from": "the campaign file"}
    return dict(
        q=q, q_source=params.q_source, streams_per_pod=sweep["streams"], alphas=list(params.seat_alphas),
        team_sizes=list(params.team_sizes), bar_tok_s=sweep["bar"],
        pod_output_tok_s=sweep["pod_output_tok_s"], turn_seconds=sweep["turn_seconds"], prefill_tok_s=prefill,
        pod_price_per_hour=price, seat_price_per_month=params.seat_price_per_month, currency=params.seat_currency,
        profile=profile, timing=timing,
        streams_at_bar_from_table=sweep["streams"], provenance=prov, source="measured",
        published_beside=beside,
    )


def _q(q_source: str, profile: UsageProfile, timing: Any, prov: dict[str, Any]) -> float:
    if q_source == "published":
        if profile.published is None or profile.published.q is None:
            raise InputError(f"profile {profile.name} states no published q (a user's own export has none); use "
                             "q_source: profile, the q this project times from its tokens")
        prov["q"] = {"file": prov["profile"]["file"], "field": "published.q", "section": profile.provenance.section}
        return float(profile.published.q)
    prov["q"] = {"formula": "hours generating / window hours, the profile's tokens timed at the bar and this pod's "
                            "prefill rate", "split": timing.split, "range": list(timing.q_range)}
    return float(timing.q)
