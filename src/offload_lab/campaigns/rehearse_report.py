"""The parts of a rehearsal after its files are derived: running the campaign part by part, the rehearsal's record
(``rehearsal.json``, ``experiments.csv``, ``would_fail.csv``, ``comparison.csv``) and its paper."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from offload_lab.campaigns import rehearse_cost
from offload_lab.campaigns import runner as campaigns
from offload_lab.core import runs
from offload_lab.core.timescale import MANIFEST_KEY, REAL_TIME, TimeScale, of_manifest, served_pace
from offload_lab.emulate.podmodel import PodModel
from offload_lab.experiments.notebook import kind_of_notebook


def stamp(run_dir: Path | str | None, scale: TimeScale) -> None:
    """Record the time scale in a run's manifest (its boot run's too): whoever reads the run against the pod
    converts its durations back from this record (:func:`offload_lab.core.timescale.of_manifest`)."""
    if not run_dir or not (Path(run_dir) / runs.MANIFEST).is_file():
        return
    m = runs.load_manifest(run_dir)
    if m.get(MANIFEST_KEY) != scale.record():
        runs.write_manifest(run_dir, {**m, MANIFEST_KEY: scale.record()})
    boot = (m.get("boot") or {}).get("run") if isinstance(m.get("boot"), dict) else None
    if boot and boot != str(run_dir):
        stamp(boot, scale)


def run_parts(rehearsal: campaigns.Campaign, data_root: Path, log: Callable[[str], None],
              progress: Any = None, scale: TimeScale = REAL_TIME) -> list[dict[str, Any]]:
    """The boots, then each experiment, each through the ordinary runner; a failure is recorded and the next part
    runs (the rehearsal's point is to find every step that would fail). Every run made is stamped with ``scale``
    as soon as its part ends (before the parts that read it run)."""
    spec = rehearsal.spec
    parts = ([campaigns.BOOTS] if spec.boots else []) + [e.experiment for e in spec.experiments]
    out = []
    for part in parts:
        t0 = time.monotonic()
        row: dict[str, Any] = {"part": part, "level": None, "message": None, "runs": [], "boots": []}
        try:
            res = campaigns.run_campaign(rehearsal, data_root=data_root, only=[part], log=log, progress=progress)
            row["runs"] = [str(r) for r in res.runs]
            row["boots"] = res.boot_attempts
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001  (a failing part is a finding of the rehearsal, never its end)
            row["level"], row["message"] = "error", f"{type(e).__name__}: {str(e)[:800]}"
            log(f"rehearsal: {part} would fail: {row['message']}")
        row["seconds"] = time.monotonic() - t0
        for r in row["runs"] + [b.get("run") for b in row["boots"]]:
            stamp(r, scale)
        for b in row["boots"]:
            if b.get("as_expected") is False:
                row["level"] = "error"
                row["message"] = (row["message"] or "") + f" boot {b['boot']}: {b['outcome']}, expected {b['expected']};"
        for r in row["runs"]:
            m = runs.load_manifest(r)
            if m.get("outcome") != "ok" and row["level"] is None:
                row["level"], row["message"] = "error", f"run {r} ended {m.get('outcome')}: {m.get('error')}"
        row["step"] = f"campaign {part}"
        out.append(row)
    return out


def length_problems(campaign: campaigns.Campaign) -> list[dict[str, Any]]:
    """Requests longer than the stack's ``max_model_len``, from the parameters alone: the load generator refuses
    them before sending (the server's /tokenize reports the limit), so the experiment fails on the pod."""
    from offload_lab.server import stack as stackmod

    out = []
    for e in campaign.spec.experiments:
        if not e.needs_server:
            continue
        st = stackmod.load_stack(campaign.stack_path(e.stack), root=campaign.root).with_override(e.override)
        limit = st.spec.server.flags.max_model_len
        p, kind = campaigns.experiment_params(campaign, e), kind_of_notebook(e.notebook)
        longest = rehearse_cost.declared(kind, "longest_requests", lambda p: [])(p)
        for what, need in longest:
            if limit and need > limit:
                out.append({"step": f"preflight {e.experiment}", "level": "error", "item": what,
                            "message": f"needs up to {need:,} tokens, over the stack's max_model_len {limit:,}: the "
                                       "load generator refuses it before sending",
                            "fix": "shorten it to fit (the study's longest prompt was 260,000 tokens) or raise "
                                   "max_model_len"})
    return out


def _seconds(manifest: dict[str, Any]) -> float | None:
    try:
        a = dt.datetime.fromisoformat(str(manifest["started_at"]).replace("Z", "+00:00"))
        b = dt.datetime.fromisoformat(str(manifest["ended_at"]).replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError):
        return None
    return (b - a).total_seconds()


def _experiment_rows(pod: campaigns.Campaign, rehearsal: campaigns.Campaign,
                     parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    full = {e.experiment: campaigns.experiment_params(pod, e) for e in pod.spec.experiments}
    rows = []
    for e in rehearsal.spec.experiments:
        part = next((p for p in parts if p["part"] == e.experiment), {})
        run = part.get("runs", [None])[-1] if part.get("runs") else None
        m = runs.load_manifest(run) if run else {}
        rows.append({"experiment": e.experiment, "kind": kind_of_notebook(e.notebook),
                     "outcome": m.get("outcome", "not run"), "run": run, "seconds": _seconds(m) if m else None,
                     "full": full.get(e.experiment, {}), "rehearsed": campaigns.experiment_params(rehearsal, e),
                     "shortened": full.get(e.experiment) != campaigns.experiment_params(rehearsal, e)})
    return rows


def _latest(data_root: Path, campaign: str, experiment: str) -> Path | None:
    return runs.latest_run(data_root, campaign, experiment)


def comparison(model: PodModel, data_root: Path, campaign: str, kinds: dict[str, str]) -> list[dict[str, Any]]:
    """The emulated measurements beside the published figures the pod model was built from: each experiment folder
    that declares ``compare`` sets its latest run (``kinds``: experiment name -> its folder) beside the model.

    A row's ``as`` (ttft_s, tpot_ms or tok_s, with ``streams`` and the reply's ``tokens``) says what kind of duration it is; its ``emulated``
    is converted back to pod time here, once, by the time scale the run's manifest records (``measured`` keeps the
    value as measured, ``time_factor`` the ratio)."""
    rows: list[dict[str, Any]] = []
    for experiment, kind in kinds.items():
        compare = rehearse_cost.declared(kind, "compare")
        if compare is None or (run := _latest(data_root, campaign, experiment)) is None:
            continue
        scale = of_manifest(runs.load_manifest(run))
        for r in compare(model, run):
            v = r.get("emulated")
            v = None if v is None or v != v else float(v)
            pod = None if v is None else scale.to_pod(v, str(r.get("as")), float(r.get("streams") or 1),
                                                      r.get("tokens"))
            rows.append({k: x for k, x in r.items() if k not in ("as", "streams", "tokens")}
                        | {"emulated": pod, "measured": v, "time_factor": (pod / v) if v and pod else None,
                           "file": str(r["file"]) if r.get("file") else None})
    return rows


def build_record(pod: campaigns.Campaign, rehearsal: campaigns.Campaign, model: PodModel, model_path: Path,
                 over: Any, overrides_file: Path | str | None, data_root: Path, parts: list[dict[str, Any]],
                 dry: dict[str, Any], failures: list[dict[str, Any]], seconds: float,
                 scale: TimeScale = REAL_TIME) -> dict[str, Any]:

    rows = _experiment_rows(pod, rehearsal, parts)
    price = campaigns._price(pod)
    # What ran here ran at the served pace: the model's seconds of it are the accelerated ones.
    totals = rehearse_cost.predict(model, rows, price, served=served_pace(model, scale))
    name = rehearsal.spec.name
    kinds = {r["experiment"]: r["kind"] for r in rows}
    timing = None
    for experiment, kind in kinds.items():
        where = rehearse_cost.declared(kind, "timing_events")
        if timing is None and where and (run := _latest(data_root, name, experiment)) is not None:
            timing = rehearse_cost.timing_error(where(run))
    notes = [n for n in (rehearse_cost.declared(k, "NOTE") for k in sorted(set(kinds.values()))) if n]
    return {
        "campaign": pod.spec.name, "campaign_file": str(pod.file), "campaign_sha256": runs.sha256_file(pod.file),
        "rehearsal_campaign": name,
        "pod_model": {"path": str(model_path), "file": model_path.name, "name": model.name,
                      "sha256": runs.sha256_file(model_path), "source": model.source, "derived": model.derived(),
                      "leaves_out": model.leaves_out,
                      # a pod model derived from hardware (offload-lab pod predict): every figure is a prediction
                      "prediction": model.prediction.model_dump() if model.prediction else None},
        "predicted": model.is_prediction,
        "time_scale": scale.factor,
        "time_scaling": scale.record(),
        "time_note": ("no acceleration: the emulated pod serves every TTFT and TPOT in real time"
                      if not scale.accelerated else
                      f"accelerated {scale.factor:g}x above floors of {scale.ttft_floor_s:g} s (TTFT) and "
                      + ("no decode acceleration" if scale.tpot_floor_ms is None
                         else f"{scale.tpot_floor_ms:.2f} ms (TPOT)")
                      + "; comparison.csv's emulated figures and the predicted minutes are in pod time"),
        "overrides": {"file": str(overrides_file) if overrides_file else None,
                      "sha256": runs.sha256_file(overrides_file) if overrides_file else None,
                      "why": over.why, "experiments": over.experiments, "skip": over.skip},
        "shortened": any(r["shortened"] for r in rows) or bool(over.skip),
        "notes": notes,  # what each experiment folder says a rehearsal of it shows (its rehearsal.NOTE)
        "topology": "the campaign's expect_gpus is dropped: the emulated pod has no GPUs (the real pod's check runs "
                    "there)",
        "dry_runs": dry,
        "parts": [{k: v for k, v in p.items() if k != "boots"} for p in parts],
        "boots": [b for p in parts for b in p.get("boots", [])],
        "experiments": rows,
        "cost": totals,
        "would_fail": failures,
        "timing_error": timing,
        "comparison": comparison(model, data_root, name, kinds),
        "seconds": seconds,
        "all_ok": all(r["outcome"] == "ok" for r in rows),
    }


def write(run: runs.Run, record: dict[str, Any]) -> None:
    run.write_json("rehearsal.json", record)
    cols = ["experiment", "kind", "outcome", "seconds", "shortened", "scale", "added_seconds", "model_seconds_full",
            "model_seconds_rehearsed", "predicted_minutes", "predicted_cost", "basis"]
    run.write_table("experiments.csv", pd.DataFrame([{c: r.get(c) for c in cols} for r in record["experiments"]]))
    run.write_table("would_fail.csv", pd.DataFrame(record["would_fail"], columns=["step", "level", "item",
                                                                                   "message", "fix"]))
    run.write_table("comparison.csv", pd.DataFrame(record["comparison"],
                                                   columns=["figure", "published", "emulated", "published_source",
                                                            "measured", "time_factor", "file"]))


def build_paper(name: str, data_root: Path, root: Path, out: Path | str | None,
                failures: list[dict[str, Any]], log: Callable[[str], None]) -> Any:
    from offload_lab.paper import build as paper

    try:
        built = paper.build_paper(campaign=name, data_root=data_root, repo_root=root,
                                  out_dir=Path(out) if out else None)
        log(f"paper of the rehearsal: {built.summary()}")
        return built
    except Exception as e:  # noqa: BLE001  (the paper build is one more step that may fail)
        failures.append({"step": "paper build", "level": "error", "message": f"{type(e).__name__}: {str(e)[:800]}"})
        log(f"rehearsal: the paper build would fail: {type(e).__name__}: {e}")
        return None
