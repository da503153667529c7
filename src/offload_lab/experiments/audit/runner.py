"""Experiment ``audit`` (the study's E1, and past it): will the model fit, and which experts should go to host RAM.

The notebook ``notebooks/audit.ipynb`` calls :func:`run_experiment`, which writes into the run directory:

- ``tiny_audit.json``: the tiny model's checkpoint by category, its per-GPU bytes and KV bytes per token;
- ``synthetic_audit.json``: the same for a header-only synthetic checkpoint at the study model's scale (a layout, not
  the real model: see configs/checkpoints/), without a plan, with a uniform plan plus the named host categories
  (the study's "gen30" shape), and with a budget-fit plan;
- ``fit.csv``: one row per (checkpoint, plan, parallelism): per-GPU GiB, usable GiB, headroom, host GiB per GPU, the
  host RAM the plan's pinned buffers take exact and with power-of-two rounding (:mod:`offload_lab.fit.host_ram`)
  against ``host_ram_gib``, and the verdict ``fits`` (GPUs and, when the host's RAM is given, host);
- ``routing_counts_{calibration,heldout,shifted}.json``: the tiny model's routing counts over the package corpus
  (even paragraphs, odd paragraphs) and over shuffled word lists (a distribution shift);
- ``generators.csv``: every generator on the tiny model at the same host share, planned on the calibration counts and
  scored on all three: expected host bytes per token, share of routed traffic from host, GPU hit rate, TPOT bound;
- ``plans/*.json``: the plan files behind those rows;
- ``events.jsonl``: raw timings (audit over loopback HTTP, served by a separate process, and from local files;
  plan generation at full scale);
- ``benchmarks.csv``: their medians and the HTTP/local ratio, recomputed from the events by :func:`summarize`;
- ``prediction_vs_measured.csv`` when the campaign has a ``context`` run: the TPOT lower bound for the served
  configuration beside the measured median TPOT.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.fit import checkpoint
from offload_lab.fit import host_ram
from offload_lab.fit import memory
from offload_lab.fit import plan as planmod
from offload_lab.fit import rangeserver
from offload_lab.fit import routing
from offload_lab.core import progress, runs
from offload_lab.fit import synthetic
from offload_lab.core.errors import InputError
from offload_lab.core.runs import EVENTS

EXPERIMENT = "audit"
BENCHMARKS = "benchmarks.csv"
GENERATORS_CSV = "generators.csv"
FIT_CSV = "fit.csv"


class AuditParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tiny_model_dir: str = Field("models/tiny-qwen3-moe", description="built here if missing")
    synthetic_spec: str = "configs/checkpoints/synthetic-dsv41-flash-exl3.yaml"
    tp: int = Field(2, ge=1, le=4096)

    def place_problems(self, root: Path) -> list[str]:
        """What is wrong with the places it names, found before it runs (`campaign check`)."""
        out = []
        tiny = root / self.tiny_model_dir
        if tiny.exists() and not tiny.is_dir():
            out.append(f"tiny_model_dir {self.tiny_model_dir} is a file; give the tiny model's directory (built "
                       "there when missing)")
        elif tiny.is_dir() and any(tiny.iterdir()) and not (tiny / "config.json").is_file():
            out.append(f"tiny_model_dir {self.tiny_model_dir} is a directory of another kind (no config.json, so no "
                       "model); give the tiny model's directory, or a missing one to build it there")
        spec = root / self.synthetic_spec
        if not spec.is_file():
            out.append(f"synthetic_spec {self.synthetic_spec} is not a file; give a spec of configs/checkpoints/")
        return out
    usable_gib: float = Field(gt=0, description="usable memory per GPU (the study: 95.6, reported by the driver)")
    reserve_gib: float = Field(0.0, ge=0, description="headroom budget-fit keeps free for KV cache and runtime")
    host_fraction: float = Field(0.3, ge=0, le=1, description="share of routed experts the fixed-share plans move")
    host_categories: list[str] = Field(default_factory=lambda: ["engram", "embedding"])
    hbm_gbps: float = Field(gt=0)
    link_gbps: float = Field(gt=0)
    host_ram_gib: float | None = Field(None, gt=0, allow_inf_nan=False,
                                       description="the host's RAM; the fit fails when a plan's pinned buffers do not "
                                                   "fit in it (None: not checked)")
    pinned: Literal["pow2", "exact"] = Field("pow2", description="pow2: PyTorch's caching host allocator rounds each "
                                             "pinned block up to a power of two; exact: cudaHostRegister")
    pinned_granularity: Literal["layer-tensor", "expert"] = "layer-tensor"
    benchmark_repeats: int = Field(3, ge=1)
    plan_repeats: int = Field(5, ge=1)
    synthetic_counts_tokens: int = Field(4096, ge=64, description="tokens of synthetic Zipf routing for timing")
    max_tokens: int = Field(512, ge=16, description="longest text routed through the tiny model")
    compare_with_context: bool = True


# ----------------------------------------------------------------------------------------------------------------


def run_experiment(run: runs.Run, params: AuditParams, data_root: Path | str | None = None,
                   root: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    from offload_lab.core.paths import find_root

    root = root or find_root()
    out: dict[str, Any] = {}
    tiny_dir = _tiny_model(root / params.tiny_model_dir, log)
    fit_rows: list[dict[str, Any]] = []
    with run.events(EVENTS) as events:
        out["tiny"] = _audit_tiny(run, tiny_dir, params, fit_rows)
        out["synthetic"] = _audit_synthetic(run, root / params.synthetic_spec, params, events, fit_rows, log)
        out["generators"] = _compare_generators(run, tiny_dir, params, log)
    run.write_table(FIT_CSV, pd.DataFrame(fit_rows))
    bench = summarize(runs.read_events(run.file(EVENTS)))
    run.write_table(BENCHMARKS, bench)
    out["benchmarks"] = bench
    if params.compare_with_context and data_root is not None:
        cmp = _prediction_vs_measured(run, Path(data_root), tiny_dir, params)
        if cmp is not None:
            out["prediction_vs_measured"] = cmp
    return out


def _tiny_model(path: Path, log: Callable[[str], None]) -> Path:
    if (path / "model.safetensors").is_file():
        return path
    from offload_lab.server.tinymodel import build_tiny_model

    target = Path(tempfile.mkdtemp(prefix="offload-lab-tiny-")) / "tiny-qwen3-moe"
    log(f"{path} has no model.safetensors; building the tiny model into {target}")
    build_tiny_model(target)
    return target


def _fit_row(label: str, plan_name: str, report: memory.MemoryReport, host_experts: int,
             ram: host_ram.HostRam | None = None) -> dict[str, Any]:
    """One row of fit.csv. ``fits`` is the verdict: the GPUs fit and, when the host's RAM is given, so do the plan's
    pinned buffers (``gpu_fits`` and ``host_fits`` say which failed)."""
    d = report.to_dict()
    h = ram.to_dict() if ram is not None else {}
    host_fits = h.get("fits")
    return {"checkpoint": label, "plan": plan_name, "tp": d["tp"], "ep": d["ep"], "per_gpu_gib": d["per_gpu_gib"],
            "usable_gib": d["usable_gib"], "headroom_gib": d["headroom_gib"],
            "fits": d["fits"] if host_fits is not False else False, "gpu_fits": d["fits"], "host_fits": host_fits,
            "host_gib_per_gpu": d["host_gib_per_gpu"], "host_experts": host_experts,
            "host_ram_exact_gib": h.get("exact_gib"), "host_ram_rounded_gib": h.get("rounded_gib"),
            "host_ram_gib": h.get("host_ram_gib"),
            "kv_bytes_per_token_per_gpu": d["kv_bytes_per_token_per_gpu"],
            "kv_tokens_in_headroom": d["kv_tokens_in_headroom"]}


def _host_ram(mm: memory.MemoryModel, hs: memory.HostSet, params: AuditParams) -> host_ram.HostRam:
    return host_ram.host_ram(mm, hs, params.host_ram_gib, granularity=params.pinned_granularity,
                             rounding=params.pinned == "pow2")


def _audit_tiny(run: runs.Run, tiny_dir: Path, params: AuditParams, fit_rows: list[dict[str, Any]]) -> dict[str, Any]:
    ckpt = checkpoint.read_checkpoint(tiny_dir)
    cls = checkpoint.classify(ckpt)
    result = checkpoint.summary(ckpt, cls)
    result["checkpoint"]["source"] = tiny_dir.name  # a name, not this machine's path
    result["weights_sha256"] = runs.sha256_file(tiny_dir / "model.safetensors")
    result["parameters"] = sum(t.numel for t in ckpt.tensors.values())
    mm = memory.MemoryModel(cls, memory.Parallelism(tp=1), ckpt.config)
    rep = mm.report()
    result["memory_tp1"] = rep.to_dict()
    result["kv"] = _kv_record(ckpt.config, 1)
    fit_rows.append(_fit_row("tiny", "none", rep, 0))
    run.write_json("tiny_audit.json", result)
    return result


def _kv_record(config: dict[str, Any] | None, tp: int) -> dict[str, Any] | None:
    if not config:
        return None
    kv = memory.kv_cache(config, tp)
    return {"kind": kv.kind, "layers": kv.layers, "values_per_token_per_layer": kv.values_per_token_per_layer,
            "dtype_bytes": kv.dtype_bytes, "bytes_per_token_total": kv.total_bytes,
            "bytes_per_token_per_gpu": kv.per_gpu_bytes, "tp": tp}


def _host_set(model: memory.MemoryModel, mask: np.ndarray, tensors: list[str]) -> memory.HostSet:
    return memory.HostSet(frozenset(model.experts.keys[int(i)] for i in np.flatnonzero(mask)), frozenset(tensors))


def _audit_synthetic(run: runs.Run, spec_path: Path, params: AuditParams, events: runs.EventLog,
                     fit_rows: list[dict[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    spec = synthetic.load_spec(spec_path)
    with tempfile.TemporaryDirectory(prefix="offload-lab-synthetic-") as tmp:
        # Outside the run directory: the manifest hashes every file there, and these are hundreds of GiB of holes.
        written = synthetic.write_checkpoint(spec, Path(tmp) / spec.name)
        log(f"synthetic checkpoint: {written['shards']} shards, {written['tensors']} tensors, "
            f"{written['apparent_bytes'] / 2**30:.1f} GiB apparent, {written['disk_bytes'] / 2**20:.1f} MiB on disk")
        ckpt, cls = _benchmark_audit(Path(tmp), spec.name, params, events)
    result = checkpoint.summary(ckpt, cls)
    result["checkpoint"]["source"] = f"synthetic:{spec.name}"
    result["spec"] = {"path": str(spec_path.name), "sha256": runs.sha256_file(spec_path), **spec.model_dump()}
    result["written"] = {k: v for k, v in written.items() if k != "dir"}
    result["parameters"] = synthetic.parameter_count(spec)
    result["kv"] = _kv_record(ckpt.config, params.tp)
    host_tensors = planmod.host_tensors_for(cls, params.host_categories)
    reports: dict[str, Any] = {}
    rams: dict[str, Any] = {}
    plans_dir = run.path / "plans"
    plans_dir.mkdir(exist_ok=True)
    for ep in (False, True):
        mm = memory.MemoryModel(cls, memory.Parallelism(tp=params.tp, ep=ep), ckpt.config)
        tag = "ep" if ep else "tp"
        rep = mm.report(usable_gib=params.usable_gib, reserve_gib=params.reserve_gib)
        reports[f"{tag}_none"] = rep.to_dict()
        ram = _host_ram(mm, memory.HostSet(), params)
        rams[f"{tag}_none"] = ram.to_dict()
        fit_rows.append(_fit_row("synthetic", "none", rep, 0, ram))
        mask = planmod.gen_uniform(mm, params.host_fraction)
        hs = _host_set(mm, mask, host_tensors)
        rep = mm.report(hs, usable_gib=params.usable_gib, reserve_gib=params.reserve_gib)
        reports[f"{tag}_uniform"] = rep.to_dict()
        ram = _host_ram(mm, hs, params)
        rams[f"{tag}_uniform"] = ram.to_dict()
        fit_rows.append(_fit_row("synthetic", "uniform+" + "+".join(params.host_categories), rep, int(mask.sum()),
                                 ram))
        if not ep:
            p = planmod.make_plan(mm, ckpt, "uniform", mask, host_tensors,
                                  {"fraction": params.host_fraction, "host_categories": params.host_categories})
            p.checkpoint.source = f"synthetic:{spec.name}"
            planmod.write_plan(p, plans_dir / "synthetic-uniform.json")
        try:
            bmask = planmod.gen_budget_fit(mm, params.usable_gib, params.reserve_gib, host_tensors)
        except InputError as e:
            reports[f"{tag}_budget_fit"] = {"error": str(e)}
            continue
        bhs = _host_set(mm, bmask, host_tensors)
        rep = mm.report(bhs, usable_gib=params.usable_gib, reserve_gib=params.reserve_gib)
        reports[f"{tag}_budget_fit"] = rep.to_dict()
        ram = _host_ram(mm, bhs, params)
        rams[f"{tag}_budget_fit"] = ram.to_dict()
        fit_rows.append(_fit_row("synthetic", "budget-fit+" + "+".join(params.host_categories), rep,
                                 int(bmask.sum()), ram))
        if not ep:
            p = planmod.make_plan(mm, ckpt, "budget-fit", bmask, host_tensors,
                                  {"usable_gib": params.usable_gib, "reserve_gib": params.reserve_gib,
                                   "tp": params.tp, "host_categories": params.host_categories})
            p.checkpoint.source = f"synthetic:{spec.name}"
            planmod.write_plan(p, plans_dir / "synthetic-budget-fit.json")
    result["memory"] = reports
    result["host_ram"] = rams
    _benchmark_plans(cls, ckpt.config, params, events)
    run.write_json("synthetic_audit.json", result)
    return result


def _timed_audit(source: str) -> tuple[float, float, checkpoint.Checkpoint, checkpoint.Classification]:
    t0 = time.perf_counter()
    ckpt = checkpoint.read_checkpoint(source)
    t_read = time.perf_counter() - t0
    cls = checkpoint.classify(ckpt)
    return t_read, time.perf_counter() - t0, ckpt, cls


def _benchmark_audit(tmp: Path, name: str, params: AuditParams,
                     events: runs.EventLog) -> tuple[checkpoint.Checkpoint, checkpoint.Classification]:
    """Audit the same headers from local files and over loopback HTTP (range requests), interleaved."""
    local = str(tmp / name)
    result: tuple[checkpoint.Checkpoint, checkpoint.Classification] | None = None
    with rangeserver.serve_directory_process(tmp) as base_url:
        url = f"{base_url}/{name}"
        fingerprints = set()
        audits = progress.counting("audit repeats", 2 * (params.benchmark_repeats + 1), "audits")
        for repeat in range(-1, params.benchmark_repeats):  # repeat -1 warms the page cache, unrecorded
            for mode, source in (("local", local), ("http", url)):
                t_read, t_total, ckpt, cls = _timed_audit(source)
                audits.add()
                fingerprints.add(ckpt.fingerprint())
                if repeat >= 0:
                    events.append({"kind": "audit", "mode": mode, "repeat": repeat, "read_s": t_read,
                                   "audit_s": t_total, "shards": len(ckpt.shards), "tensors": len(ckpt.tensors),
                                   "requests": ckpt.requests, "fetched_bytes": ckpt.fetched_bytes,
                                   "checkpoint_bytes": ckpt.total_bytes})
                result = (ckpt, cls) if mode == "local" else result
    if len(fingerprints) != 1:
        raise InputError("the synthetic checkpoint read differently over HTTP than from the files")
    assert result is not None
    return result


def _benchmark_plans(cls: checkpoint.Classification, config: dict[str, Any] | None, params: AuditParams,
                     events: runs.EventLog) -> None:
    mm = memory.MemoryModel(cls, memory.Parallelism(tp=params.tp), config)
    eb = cls.expert_bytes()
    per_layer = max(e for _, e in eb) + 1
    top_k = int((config or {}).get("num_experts_per_tok") or 1)
    # Timing only: Zipf counts, not any model's routing.
    counts = routing.synthetic_counts(mm.experts.layers, per_layer, top_k, params.synthetic_counts_tokens, seed=0)
    host_tensors = planmod.host_tensors_for(cls, params.host_categories)
    timed = progress.counting("plan repeats", len(planmod.GENERATORS) * params.plan_repeats, "plans")
    for gen in planmod.GENERATORS:
        for repeat in range(params.plan_repeats):
            t0 = time.perf_counter()
            mask = planmod.generate(mm, gen, fraction=params.host_fraction, counts=counts,
                                    usable_gib=params.usable_gib, reserve_gib=params.reserve_gib,
                                    host_tensors=host_tensors)
            elapsed = time.perf_counter() - t0
            events.append({"kind": "plan_generation", "generator": gen, "repeat": repeat, "seconds": elapsed,
                           "experts": len(mm.experts.keys), "host_experts": int(mask.sum())})
            timed.add()


# ----------------------------------------------------------------------------------------------------------------
# Generators on the tiny model's routing counts


def _compare_generators(run: runs.Run, tiny_dir: Path, params: AuditParams,
                        log: Callable[[str], None]) -> pd.DataFrame:
    paragraphs = routing.corpus_paragraphs()
    shifted = routing.shifted_texts(max(8, len(paragraphs) // 2))
    log(f"routing {len(paragraphs)} corpus paragraphs and {len(shifted)} shifted texts through the tiny model")
    progress.phase("audit", f"routing {len(paragraphs) + len(shifted)} texts through the tiny model in transformers")
    collected = routing.collect_hf(tiny_dir, paragraphs + shifted, max_tokens=params.max_tokens)
    progress.end("audit", "routing counts collected")
    n = len(paragraphs)
    sets = {
        "calibration": counts_for(collected, range(0, n, 2), "corpus paragraphs 0, 2, 4, ..."),
        "heldout": counts_for(collected, range(1, n, 2), "corpus paragraphs 1, 3, 5, ..."),
        "shifted": counts_for(collected, range(n, n + len(shifted)), "shuffled word lists (prompts.filler_text)"),
    }
    paths = {}
    for name, c in sets.items():
        paths[name] = c.save(run.file(f"routing_counts_{name}.json"))
    ckpt = checkpoint.read_checkpoint(tiny_dir)
    cls = checkpoint.classify(ckpt)
    mm = memory.MemoryModel(cls, memory.Parallelism(tp=1), ckpt.config)
    calib = sets["calibration"]
    # Budget-fit decides how many experts; to compare the orders at the same host share, give it the budget that
    # leaves exactly host_fraction of the expert bytes to move (computed, not chosen).
    target = planmod.target_count(mm, params.host_fraction, None)
    full = mm.report().per_gpu_bytes
    moved = float(np.sort(mm.experts.bytes)[::-1][:target].sum())
    budget_gib = (full - moved) / memory.GiB
    variants: list[tuple[str, str, np.ndarray, dict[str, Any], bool]] = [
        ("uniform", "uniform", planmod.gen_uniform(mm, params.host_fraction), {"within": "index"}, False),
        ("uniform-coldest", "uniform", planmod.gen_uniform(mm, params.host_fraction, counts=calib, within="coldest"),
         {"within": "coldest"}, True),
        ("layer-order", "layer-order", planmod.gen_layer_order(mm, params.host_fraction), {}, False),
        ("budget-fit", "budget-fit", planmod.gen_budget_fit(mm, budget_gib, 0.0), {"usable_gib": budget_gib}, False),
        ("budget-fit-coldest", "budget-fit", planmod.gen_budget_fit(mm, budget_gib, 0.0, counts=calib),
         {"usable_gib": budget_gib}, True),
        ("activation-aware", "activation-aware", planmod.gen_activation_aware(mm, calib, params.host_fraction), {},
         True),
    ]
    bw = planmod.Bandwidth(params.hbm_gbps, params.link_gbps)
    rows = []
    plans_dir = run.path / "plans"
    plans_dir.mkdir(exist_ok=True)
    for label, gen, mask, extra, uses_counts in variants:
        hs = _host_set(mm, mask, [])
        p = planmod.make_plan(mm, ckpt, gen, mask, [], {"fraction": params.host_fraction, **extra},
                              counts=calib if uses_counts else None,
                              counts_path=paths["calibration"] if uses_counts else None, model_name=tiny_dir.name)
        p.checkpoint.source = tiny_dir.name
        if p.statistics:
            p.statistics.path = paths["calibration"].name
        p.predicted = planmod.predict(mm, hs, calib, bw)
        planmod.write_plan(p, plans_dir / f"tiny-{label}.json")
        row: dict[str, Any] = {"plan": label, "generator": gen, "uses_counts": uses_counts,
                               "host_experts": int(mask.sum()), "experts": len(mask),
                               "host_expert_bytes": int((mm.experts.bytes * mask).sum())}
        for name, c in sets.items():
            pr = planmod.predict(mm, hs, c, bw)
            row[f"host_bytes_per_token_{name}"] = pr["host_bytes_per_token"]
            row[f"host_share_{name}"] = pr["host_share_of_routed_traffic"]
            row[f"gpu_hit_rate_{name}"] = pr["gpu_hit_rate"]
            row[f"tpot_lower_bound_ms_{name}"] = pr["tpot_lower_bound_ms"]
        rows.append(row)
    table = pd.DataFrame(rows)
    run.write_table(GENERATORS_CSV, table)
    return table


def counts_for(collected: dict[str, Any], indices: range, texts: str) -> routing.RoutingCounts:
    return routing.counts_from_collected(collected, indices, model="tiny-qwen3-moe", source={"texts_desc": texts})


# ----------------------------------------------------------------------------------------------------------------
# Prediction beside measurement


def _prediction_vs_measured(run: runs.Run, data_root: Path, tiny_dir: Path,
                            params: AuditParams) -> dict[str, Any] | None:
    campaign = run.manifest.get("campaign")
    ctx = runs.latest_run(data_root, campaign, "context") if campaign else None
    if ctx is None or not (ctx / "summary.csv").is_file():
        return None
    summary = pd.read_csv(ctx / "summary.csv")
    if summary.empty or "tpot_median_ms" not in summary:
        return None
    ckpt = checkpoint.read_checkpoint(tiny_dir)
    mm = memory.MemoryModel(checkpoint.classify(ckpt), memory.Parallelism(tp=1), ckpt.config)
    calib = routing.RoutingCounts.load(run.file("routing_counts_calibration.json"))
    pred = planmod.predict(mm, memory.HostSet(), calib, planmod.Bandwidth(params.hbm_gbps, params.link_gbps))
    row = summary.sort_values("context_tokens").iloc[0]
    out = {"context_run": ctx.name, "context_tokens": int(row["context_tokens"]),
           "measured_tpot_median_ms": float(row["tpot_median_ms"]),
           "predicted_tpot_lower_bound_ms": pred["tpot_lower_bound_ms"], "plan": "none (all weights on the device)",
           "hbm_gbps": params.hbm_gbps, "link_gbps": params.link_gbps}
    run.write_table("prediction_vs_measured.csv", pd.DataFrame([out]))
    run.write_json("prediction_vs_measured_sources.json",
                   {"context_summary": str((ctx / "summary.csv").relative_to(data_root)),
                    "context_summary_sha256": runs.sha256_file(ctx / "summary.csv")})
    return out


# ----------------------------------------------------------------------------------------------------------------
# Summaries from raw events


def summarize(events: list[dict[str, Any]]) -> pd.DataFrame:
    """Benchmark medians from the raw events: audit seconds (local, HTTP, ratio) and plan generation seconds."""
    rows: list[dict[str, Any]] = []
    audits = [e for e in events if e.get("kind") == "audit"]
    by_mode = {m: [e for e in audits if e["mode"] == m] for m in ("local", "http")}
    if by_mode["local"] and by_mode["http"]:
        local = statistics.median(e["audit_s"] for e in by_mode["local"])
        http = statistics.median(e["audit_s"] for e in by_mode["http"])
        ex = by_mode["http"][0]
        rows.append({"benchmark": "audit_local", "n": len(by_mode["local"]), "median_s": local, "value": local,
                     "unit": "s", "shards": ex["shards"], "tensors": ex["tensors"]})
        rows.append({"benchmark": "audit_http", "n": len(by_mode["http"]), "median_s": http, "value": http,
                     "unit": "s", "shards": ex["shards"], "tensors": ex["tensors"]})
        rows.append({"benchmark": "audit_http_over_local", "n": min(len(by_mode["local"]), len(by_mode["http"])),
                     "median_s": None, "value": http / local, "unit": "ratio", "shards": ex["shards"],
                     "tensors": ex["tensors"]})
        # Reading headers only (the part that differs between the two; classification is the same work).
        local_r = statistics.median(e["read_s"] for e in by_mode["local"])
        http_r = statistics.median(e["read_s"] for e in by_mode["http"])
        for label, v in (("read_local", local_r), ("read_http", http_r)):
            rows.append({"benchmark": label, "n": len(by_mode["local"]), "median_s": v, "value": v, "unit": "s",
                         "shards": ex["shards"], "tensors": ex["tensors"]})
        rows.append({"benchmark": "read_http_over_local", "n": len(by_mode["http"]), "median_s": None,
                     "value": http_r / local_r, "unit": "ratio", "shards": ex["shards"], "tensors": ex["tensors"]})
        rows.append({"benchmark": "audit_http_fetched_bytes", "n": len(by_mode["http"]), "median_s": None,
                     "value": statistics.median(e["fetched_bytes"] for e in by_mode["http"]), "unit": "bytes",
                     "shards": ex["shards"], "tensors": ex["tensors"]})
    gens = [e for e in events if e.get("kind") == "plan_generation"]
    for gen in dict.fromkeys(e["generator"] for e in gens):
        sel = [e for e in gens if e["generator"] == gen]
        med = statistics.median(e["seconds"] for e in sel)
        rows.append({"benchmark": f"plan_{gen}", "n": len(sel), "median_s": med, "value": med * 1e3, "unit": "ms",
                     "shards": None, "tensors": None, "experts": sel[0]["experts"]})
    return pd.DataFrame(rows)


def summarize_run(run_dir: Path | str) -> pd.DataFrame:
    return summarize(runs.read_events(Path(run_dir) / EVENTS))


__all__ = ["AuditParams", "run_experiment", "summarize", "summarize_run", "EXPERIMENT"]
