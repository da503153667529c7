"""The "will it fit" commands as library calls: each takes its request (:mod:`offload_lab.fit.requests`) and returns
what the command prints with ``--json``, so that the command line only parses flags and renders, and everything here
is tested without it. A refusal is an :class:`~offload_lab.core.errors.InputError` naming the flag."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offload_lab.core import inputs
from offload_lab.core.errors import InputError
from offload_lab.fit import requests as rq


@dataclass
class Sized:
    """A checkpoint read and sized for the request's GPUs: ``reserve_gib`` is what each GPU keeps free, the
    activations reserve plus the KV cache (``budget`` has the parts)."""

    ckpt: Any
    cls: Any
    layout: Any = None
    model: Any = None
    budget: dict[str, Any] = field(default_factory=dict)
    reserve_gib: float = 0.0


def read(req: rq.SourceOptions, source: str) -> Sized:
    """The checkpoint ``source`` names and its classification: from the safetensors headers, or, for a config.json
    (or ``--from-config``), from transformers' model built on the meta device (fit/hfmodel.py)."""
    from offload_lab.fit import checkpoint, formats, hfcheckpoint, hfmodel

    opts = checkpoint.RemoteOptions(concurrency=req.concurrency, retries=req.retries)
    fmts = formats.parse_assignments(req.format_for, req.weights)
    if hfmodel.config_source(source, req.from_config):
        ckpt, cls, lay = hfmodel.read_model(source, opts, hf_endpoint=req.hf_endpoint, formats=fmts)
        return Sized(ckpt, cls, lay)
    if fmts:
        raise InputError(f"--weights/--format-for size a model from its config.json; {source} is read from its "
                         "safetensors headers, whose bytes are what it stores (add --from-config to size it anew)")
    ckpt = checkpoint.read_checkpoint(source, opts, hf_endpoint=req.hf_endpoint)
    if not any(shard.tensors for shard in ckpt.shards):
        # An empty header "fits" anything: say that there is nothing to fit instead.
        raise InputError(f"checkpoint {source}: its safetensors header(s) hold no tensor, so there is nothing to fit; "
                         "give a model's checkpoint")
    by_hf = None if req.architecture else hfcheckpoint.classify_by_transformers(ckpt)
    if by_hf is not None:
        return Sized(ckpt, *by_hf)
    return Sized(ckpt, checkpoint.classify(ckpt, req.architecture, req.engram_pattern))


def check_heads(config: dict[str, Any] | None, tp: int) -> None:
    """vLLM splits the attention heads over the tensor-parallel GPUs: --tp must divide their number."""
    heads = (config or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads > 0 and heads % tp:
        fits = [n for n in range(1, heads + 1) if heads % n == 0]
        raise InputError(f"--tp {tp}: the model has {heads} attention heads, which {tp} GPUs cannot share evenly "
                         f"(vLLM refuses it); give one of {fits}")


def sized(req: rq.FitOptions, source: str) -> Sized:
    """Read ``source`` and size it for the request's GPUs: the memory model, and what each GPU keeps free beside the
    weights, the activations reserve (--reserve-gib) plus the KV cache of --streams sequences of --context tokens,
    from the architecture (fit/kvbudget.py)."""
    from offload_lab.fit import kvbudget, memory

    s = read(req, source)
    check_heads(s.ckpt.config, req.tp)
    par = memory.Parallelism(tp=req.tp, ep=req.ep, placement=req.placement, tp_modes=memory.parse_tp_modes(req.tp_mode))
    s.model = memory.MemoryModel(s.cls, par, s.ckpt.config)
    s.reserve_gib = req.reserve_gib
    s.budget = {"activation_reserve_gib": req.reserve_gib, "activation_reserve_source":
                "--reserve-gib" if "reserve_gib" in req.model_fields_set else
                "the default: the dsv41 anchor's activations, graphs and staging; vLLM profiles yours at start-up"}
    context = req.context if req.context is not None else kvbudget.default_context(s.ckpt.config)
    if s.ckpt.config and context:
        try:
            kv = kvbudget.kv_budget(s.ckpt.config, req.tp, context, req.streams, s.layout)
        except InputError as e:
            s.budget["kv"] = {"error": str(e)}
        else:
            s.budget["kv"] = kv.to_dict()
            s.reserve_gib += kv.bytes_per_gpu / 2**30
    else:
        s.budget["kv"] = {"context": context, "streams": req.streams, "bytes_per_gpu": 0,
                          "note": "no config.json: KV cache not sized" if context else "--context 0: weights only"}
    s.budget["reserve_gib_total"] = s.reserve_gib
    return s


def bandwidth(req: rq.FitOptions) -> Any:
    from offload_lab.fit.predict import Bandwidth

    return Bandwidth(req.hbm_gbps, req.link_gbps) if req.hbm_gbps and req.link_gbps else None


def fit_errors(plan_path: str, problems: list[Any], what: str) -> None:
    errors = [p.message for p in problems if p.level == "error"]
    if errors:
        raise InputError(f"plan file {plan_path} does not fit {what}:\n  " + "\n  ".join(inputs.summarize(errors)))


def check_new_out(path: str, force: bool) -> None:
    """An ``--out`` file to write: refused if it exists (unless ``force``) or if its folder does not (a typo in the
    path would otherwise create folders nobody asked for). Checked before any work."""
    inputs.check_out(path, force)
    parent = Path(path).parent
    if not parent.is_dir():
        raise InputError(f"--out {path}: the folder {parent} does not exist; create it first or fix the path")


def _host_ram(req: rq.FitOptions, s: Sized, hs: Any, limit: float | None) -> Any:
    from offload_lab.fit import host_ram

    return host_ram.host_ram(s.model, hs, limit, req.host_reserve_gib, req.pinned_granularity, req.pinned == "pow2",
                             req.pinned_max_round_mib)


def _params(s: Sized) -> dict[str, Any]:
    from offload_lab.fit import hfcheckpoint

    if s.layout is not None:
        return {**s.layout.params(), "source": f"transformers {s.layout.model_class} on the meta device"}
    return hfcheckpoint.params_from_checkpoint(s.ckpt, s.cls)


# --- audit -------------------------------------------------------------------------------------------------------

def audit(req: rq.Audit) -> dict[str, Any]:
    """Bytes per GPU (and per pipeline stage) without and with ``--plan``, host RAM, KV cache; ``fits`` says it."""
    from offload_lab.fit import checkpoint, memory
    from offload_lab.fit import plan as planmod

    plan = planmod.read_plan(req.with_plan) if req.with_plan else None
    s = sized(req, req.source)
    result = checkpoint.summary(s.ckpt, s.cls)
    result["params"] = _params(s)
    result["budget"] = s.budget
    sets = {"without_plan": memory.HostSet()}
    if plan is not None:
        problems = planmod.check_plan(plan, s.cls, s.ckpt)
        fit_errors(req.with_plan, problems, "this checkpoint")  # type: ignore[arg-type]
        sets["with_plan"] = plan.host_set()
        result["plan"] = {"path": req.with_plan, **planmod.plan_summary(plan),
                          "warnings": [p.message for p in problems]}
    result["memory"] = {k: s.model.report(hs, usable_gib=req.usable_gib, reserve_gib=s.reserve_gib).to_dict()
                        for k, hs in sets.items()}
    result["host_ram"] = {k: _host_ram(req, s, hs, req.host_ram_gib).to_dict() for k, hs in sets.items()}
    if req.pp > 1:  # per stage, each stage's layers on its own --tp GPUs
        from offload_lab.server.multinode import parse_partition

        result["pipeline"] = {k: [st.to_dict() for st in memory.per_gpu_pipeline(
            s.cls, s.model.par, req.pp, parse_partition(req.pp_partition), hs, req.usable_gib, s.reserve_gib,
            s.ckpt.config)] for k, hs in sets.items()}
    if s.ckpt.config:
        try:
            kv = memory.kv_cache(s.ckpt.config, req.tp)
            result["kv"] = {"kind": kv.kind, "bytes_per_token_per_gpu": kv.per_gpu_bytes,
                            "bytes_per_token_total": kv.total_bytes}
        except InputError as e:
            result["kv"] = {"error": str(e)}
    last = list(sets)[-1]
    gpus = result["pipeline"][last] if req.pp > 1 else [result["memory"][last]]
    result["fits"] = all(g["fits"] is not False for g in gpus) and result["host_ram"][last]["fits"] is not False
    return result


# --- plan make|check|show|export|import --------------------------------------------------------------------------

def plan_make(req: rq.PlanMake) -> tuple[dict[str, Any], int]:
    """Generate and write a plan; its summary, memory, host RAM and predicted cost, and the routed experts there
    were. A plan whose pinned buffers do not fit the host's RAM is refused unless --no-host-limit."""
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    check_new_out(req.out, req.force)  # before any work: a refusal costs nothing
    s = sized(req, req.source)
    counts = RoutingCounts.load(req.counts) if req.counts else None
    host_tensors = planmod.host_tensors_for(s.cls, req.host_category, req.host_tensor)
    mask = planmod.generate(s.model, req.generator, fraction=req.fraction, count=req.count, counts=counts,
                            usable_gib=req.usable_gib, reserve_gib=s.reserve_gib, host_tensors=host_tensors,
                            max_layer_fraction=req.max_layer_fraction, within=req.within)
    given = req.model_dump() | {"reserve_gib": s.reserve_gib}
    params = {k: given[k] for k in ("fraction", "count", "usable_gib", "reserve_gib", "max_layer_fraction", "within",
                                    "tp", "ep", "placement") if given[k] is not None}
    params["host_categories"] = req.host_category
    plan = planmod.make_plan(s.model, s.ckpt, req.generator, mask, host_tensors, params, counts=counts,
                             counts_path=Path(req.counts) if req.counts else None, model_name=req.model)
    hs = plan.host_set()
    report = s.model.report(hs, usable_gib=req.usable_gib, reserve_gib=s.reserve_gib)
    host = _host_check(req, s, hs)
    if counts is not None:
        plan.predicted = planmod.predict(s.model, hs, counts, bandwidth(req))
    planmod.write_plan(plan, req.out)
    return ({"plan": req.out, **planmod.plan_summary(plan), "memory": report.to_dict(), "host_ram": host,
             "budget": s.budget, "predicted": plan.predicted}, len(s.model.experts.keys))


def _host_check(req: rq.PlanMake, s: Sized, hs: Any) -> dict[str, Any]:
    """The plan's pinned host bytes (with the allocator's rounding) against the host's RAM: --host-ram-gib, else this
    machine's; a plan that does not fit is refused (exit 2) unless --no-host-limit."""
    from offload_lab.fit import host_ram

    limit = None if req.no_host_limit else (req.host_ram_gib or host_ram.this_host_ram_gib())
    hr = _host_ram(req, s, hs, limit)
    out = {**hr.to_dict(), "limit_source": "none (--no-host-limit)" if req.no_host_limit else
           "--host-ram-gib" if req.host_ram_gib else "this machine's RAM (/proc/meminfo MemTotal)"}
    if hr.fits is False:
        raise InputError(f"plan needs {hr.needed_bytes / 2**30:,.2f} GiB of pinned host RAM "
                         f"({'power-of-two blocks' if hr.rounding else 'exact blocks'}, {hr.blocks:,} of them; "
                         f"{hr.exact_bytes / 2**30:,.2f} GiB exact) but the host has {limit:,.2f} GiB"
                         f"{f' less {req.host_reserve_gib:g} GiB reserved' if req.host_reserve_gib else ''} "
                         f"({out['limit_source']}); not written. Give the host's RAM with --host-ram-gib, move fewer "
                         "experts, or --no-host-limit")
    return out


@dataclass
class Checked:
    """``plan check``'s answer: ``out`` is its JSON; ``problems`` are (level, message) pairs; ``line`` says it is
    good (empty when it is not)."""

    out: dict[str, Any]
    problems: list[tuple[str, str]]
    line: str

    @property
    def ok(self) -> bool:
        return not any(level == "error" for level, _ in self.problems)


def plan_check(req: rq.PlanCheck) -> Checked:
    """Check a plan against a checkpoint; with --format (or --written-from), read the file as the code that reads
    that format would."""
    from offload_lab.fit import plan as planmod

    if req.format != "offload-lab" or req.written_from:
        return _check_as(req)
    plan = planmod.read_plan(req.plan_file)
    s = read(req, req.source)
    problems = [(p.level, p.message) for p in planmod.check_plan(plan, s.cls, s.ckpt)]
    ok = not any(level == "error" for level, _ in problems)
    return Checked({"plan": req.plan_file, "ok": ok, "problems": [{"level": lv, "message": m} for lv, m in problems]},
                   problems, f"{req.plan_file}: ok against {s.ckpt.source} ({len(plan.experts()):,} host experts, "
                             f"{len(plan.host_tensors)} host tensors)" if ok else "")


def _check_as(req: rq.PlanCheck) -> Checked:
    from offload_lab.fit import engine_plans, plan_formats
    from offload_lab.fit import plan as planmod

    expected = planmod.read_plan(req.written_from) if req.written_from else None
    if req.format in engine_plans.ENGINE_FORMATS:
        # The architecture's own layer names (vLLM's model code, GGUF's names): a plan keyed for another model's
        # layers is refused, naming the first key no layer reaches.
        names, s = _engine_names(req, req.source)
        view = engine_plans.read(req.plan_file, req.format, names)
        if expected is not None and view.ok:
            view.problems += plan_formats.differences(view, expected)
    else:
        s = read(req, req.source)
        n_exp = max((e for _, e in s.cls.expert_bytes()), default=-1) + 1
        view = plan_formats.read_as(req.plan_file, req.format, s.cls.moe_layers(), n_exp, expected=expected)
    out = {**view.summary(), "checkpoint": str(s.ckpt.source), "written_from": req.written_from}
    same = f", exactly the host experts of {req.written_from}" if expected is not None else ""
    return Checked(out, [("error", p) for p in view.problems],
                   f"{req.plan_file}: ok as {req.format} against {s.ckpt.source}: the offload part finds "
                   f"{out['layers_found']} of {out['moe_layers']} MoE layers, {out['host_experts']:,} host experts"
                   f"{same}" if view.ok else "")


def _engine_names(req: rq.SourceOptions, source: str) -> tuple[Any, Sized]:
    from offload_lab.fit import engine_plans, memory

    if isinstance(req, rq.FitOptions):
        s = sized(req, source)
    else:  # plan check: the names alone; bytes per GPU at one GPU
        s = read(req, source)
        s.model = memory.MemoryModel(s.cls, memory.Parallelism(tp=1), s.ckpt.config)
    return engine_plans.names_for(s.ckpt, s.cls, s.model, s.layout), s


def plan_show(req: rq.PlanShow) -> dict[str, Any]:
    """A plan's summary; with --checkpoint its memory, with --counts too its predicted cost."""
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    if req.counts and not req.checkpoint:
        raise InputError("--counts needs --checkpoint (expert sizes come from the checkpoint's headers)")
    plan = planmod.read_plan(req.plan_file)
    out: dict[str, Any] = {"plan": req.plan_file, **planmod.plan_summary(plan),
                           "host_experts_per_layer": {k: len(v) for k, v in plan.host_experts.items()}}
    if req.checkpoint:
        s = sized(req, req.checkpoint)
        fit_errors(req.plan_file, planmod.check_plan(plan, s.cls, s.ckpt),
                   f"{req.checkpoint}; run `offload-lab plan check`")
        out["memory"] = s.model.report(plan.host_set(), usable_gib=req.usable_gib,
                                       reserve_gib=s.reserve_gib).to_dict()
        if req.counts:
            out["predicted"] = planmod.predict(s.model, plan.host_set(), RoutingCounts.load(req.counts),
                                               bandwidth(req), batch=req.batch)
    return out


def plan_export(req: rq.PlanExport) -> dict[str, Any]:
    """Write the plan's host experts in an engine's format (names from --checkpoint's architecture)."""
    from offload_lab.fit import engine_plans, hostplan
    from offload_lab.fit import plan as planmod

    check_new_out(req.out, req.force)
    plan = planmod.read_plan(req.plan_file)
    if req.checkpoint:
        names, s = _engine_names(req, req.checkpoint)
        fit_errors(req.plan_file, planmod.check_plan(plan, s.cls), f"{req.checkpoint}; run `offload-lab plan check`")
        return {"out": req.out, "format": req.format, **engine_plans.write(plan, req.format, names, req.out)}
    if req.format != hostplan.FORMAT_NAME:
        raise InputError(f"--format {req.format}: needs --checkpoint (the model's layer names and expert bytes "
                         "come from its config.json or checkpoint)")
    mapping, dropped = hostplan.to_host_plan(plan)
    hostplan.write_host_plan(mapping, req.out)
    return {"out": req.out, "format": req.format, "layers": len(mapping),
            "host_experts": sum(len(v) for v in mapping.values()), "dropped": dropped,
            "layer_name": hostplan.KEY, "names_from": "DeepSeek-V4's (no --checkpoint)"}


def plan_import(req: rq.PlanImport) -> dict[str, Any]:
    """Read another stack's plan into an offload-lab plan, checked against --checkpoint when given."""
    from offload_lab.fit import hostplan
    from offload_lab.fit import plan as planmod

    check_new_out(req.out, req.force)
    mapping = hostplan.read_host_plan(req.file)
    s = read(req, req.checkpoint) if req.checkpoint else None
    plan = hostplan.from_host_plan(
        mapping, f"host plan {req.file}", model=req.model or "", source=req.checkpoint,
        moe_layers=s.cls.moe_layers() if s else None,
        experts_per_layer=max((e for _, e in s.cls.expert_bytes()), default=-1) + 1 if s else None)
    if s is not None:
        plan.checkpoint.fingerprint = s.ckpt.fingerprint()
        fit_errors(req.file, planmod.check_plan(plan, s.cls, s.ckpt), req.checkpoint)  # type: ignore[arg-type]
    planmod.write_plan(plan, req.out)
    return {"out": req.out, **planmod.plan_summary(plan)}


# --- checkpoint synth, routing collect ---------------------------------------------------------------------------

def checkpoint_synth(req: rq.CheckpointSynth) -> dict[str, Any]:
    """Write a header-only checkpoint from a spec (YAML) or a Hugging Face config.json."""
    from offload_lab.core.places import check_output
    from offload_lab.fit import hfcheckpoint, synthetic

    check_output(req.out, "--out", "dir")  # before the spec is read: a bad place is refused at once
    if req.spec.endswith(".json") or Path(req.spec).is_dir() or "://" in req.spec:
        return hfcheckpoint.write_synthetic(req.spec, req.out, req.shards)
    spec = synthetic.load_spec(req.spec)
    if req.shards:
        spec = spec.model_copy(update={"shards": req.shards})
    return {**synthetic.write_checkpoint(spec, req.out), "parameters": synthetic.parameter_count(spec)}


def routing_collect(req: rq.RoutingCollect) -> tuple[dict[str, Any], int]:
    """Run a local model's routers over texts and write the counts; the summary and how many texts were read."""
    from offload_lab.fit import routing

    check_new_out(req.out, req.force)
    if not Path(req.model_dir).is_dir():
        raise InputError(f"--model-dir {req.model_dir}: no such model directory (a Hugging Face model saved locally)")
    if req.texts:
        texts = [t for t in inputs.read_text(req.texts, "--texts file", inputs.DATA_MAX_BYTES).split("\n\n")
                 if t.strip()]
    else:
        texts = routing.corpus_paragraphs()
    collected = routing.collect_hf(req.model_dir, texts, python=req.python, max_tokens=req.max_tokens)
    counts = routing.counts_from_collected(collected, model=req.name or Path(req.model_dir).name,
                                           source={"texts_file": req.texts or "package corpus"})
    counts.save(req.out)
    return ({"out": req.out, "tokens": counts.tokens, "layers": counts.layers, "num_experts": counts.num_experts,
             "top_k": counts.top_k}, len(texts))


def audit_lines(r: dict[str, Any]) -> list[str]:
    """The audit as the text the command prints."""
    out: list[str] = []
    write = out.append
    ck = r["checkpoint"]
    if ck["kind"] == "config":
        write(f"{ck['source']}: {ck['tensors']:,} tensors from transformers' model of this config (meta device, no "
              f"weights), {ck['total_bytes'] / 2**30:.2f} GiB at the config's dtype; architecture {r['architecture']}")
    else:
        write(f"{ck['source']}: {ck['shards']} shard(s), {ck['tensors']:,} tensors, {ck['total_bytes'] / 2**30:.2f} "
              f"GiB (read {ck['fetched_bytes']:,} header bytes"
              + (f" in {ck['requests']} requests" if ck["requests"] else "") + f"); rules: {r['architecture']}")
    p = r.get("params") or {}
    if p.get("total") and p.get("active") is not None:
        write(f"  parameters: {p['total'] / 1e9:.2f}B total, {p['active'] / 1e9:.2f}B active per token "
              f"({p['active_without_input_embedding'] / 1e9:.2f}B without the input embedding; routed experts "
              f"{p['experts_per_token']} of {p['experts_per_layer']})")
    elif p.get("total"):
        # Without a config.json the active share is unknown (which experts a token uses is the config's).
        write(f"  parameters: {p['total'] / 1e9:.2f}B total; "
              + (p.get("note") or "active per token not counted (give the model's config.json)"))
    elif p.get("note"):
        write(f"  parameters: {p['note']}")
    if ck.get("commit"):
        write(f"  revision {ck['revision']} = commit {ck['commit']}")
    write(f"  {'category':15} {'tensors':>9} {'GiB':>10}")
    for cat, v in r["categories"].items():
        if v["tensors"]:
            write(f"  {cat:15} {v['tensors']:>9,} {v['bytes'] / 2**30:>10.3f}")
    re_ = r["routed_experts"]
    if re_["experts"]:
        write(f"  routed experts: {re_['experts']:,} in {re_['layers']} layers (layers {re_['first_layer']}-"
              f"{re_['last_layer']}), {re_['bytes_per_expert_median'] / 2**20:.2f} MiB each (median)")
    for o in r["other"]["largest"][:5]:
        write(f"  other: {o['name']} ({o['bytes']:,} bytes)")
    for label, m in r["memory"].items():
        verdict = {True: "fits", False: "does NOT fit", None: "(no --usable-gib)"}[m["fits"]]
        write(f"  {label.replace('_', ' ')}: TP {m['tp']}{' EP' if m['ep'] else ''}: {gib(m['per_gpu_gib'])} per GPU "
              f"against {gib(m['usable_gib'])} usable, headroom {gib(m['headroom_gib'])}"
              f" (kept free {m['reserve_gib']:.2f} GiB): {verdict}; host {gib(m['host_gib_per_gpu'])} per GPU")
        h = r["host_ram"][label]
        if h["blocks"]:
            verdict = {True: "fits", False: "does NOT fit", None: "(no --host-ram-gib)"}[h["fits"]]
            write(f"    host RAM: {gib(h['exact_gib'])} exact, {gib(h['rounded_gib'])} with power-of-two pinned "
                  f"blocks (x{h['rounding_factor']:.3f}, {h['blocks']} blocks, {h['granularity']}); {h['allocation']} "
                  f"against {gib(h['host_ram_gib'])} (reserve {h['reserve_gib']:g} GiB): {verdict}")
    for label, stages in r.get("pipeline", {}).items():
        write(f"  {label.replace('_', ' ')}, pipeline parallel {len(stages)}:")
        for i, m in enumerate(stages):
            verdict = {True: "fits", False: "does NOT fit", None: "(no --usable-gib)"}[m["fits"]]
            write(f"    stage {i}: {gib(m['per_gpu_gib'])} per GPU, headroom {gib(m['headroom_gib'])}: {verdict}; "
                  f"host {gib(m['host_gib_per_gpu'])} per GPU")
    b = r.get("budget") or {}
    kv = b.get("kv") or {}
    if "bytes_per_gpu" in kv and kv.get("kind"):
        extra = (f", {kv['sliding_layers']} sliding-window layers of {kv['sliding_window']}" if kv["sliding_layers"]
                 else "") + (f", {kv['state_layers']} state layers" if kv["state_layers"] else "")
        write(f"  kept free per GPU: KV cache {kv['gib_per_gpu']:.2f} GiB ({kv['kind']}, {kv['streams']} stream(s) x "
              f"{kv['context']:,} tokens, {kv['full_layers']} full-attention layers{extra}) + activations/graphs "
              f"{b['activation_reserve_gib']:g} GiB ({b['activation_reserve_source']})")
    elif b:
        write(f"  kept free per GPU: activations/graphs {b['activation_reserve_gib']:g} GiB; KV cache: "
              f"{kv.get('error') or kv.get('note')}")
    if "kv" in r and "bytes_per_token_per_gpu" in r["kv"]:
        write(f"  KV cache ({r['kv']['kind']}): {r['kv']['bytes_per_token_per_gpu']:,} bytes per token per GPU")
    for w in r.get("plan", {}).get("warnings", []):
        write(f"  warning: {w}")
    return out


def gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} GiB"
