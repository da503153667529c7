"""The "will it fit" subcommands of ``offload-lab``: audit, plan make|check|show, memory-math, checkpoint synth,
routing collect. Registered by :func:`add_parsers` from ``cli.build_parser``; kept here so that the shared CLI module
only gains one line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from offload_lab.core.errors import InputError


from offload_lab.cli.common import print_json as _print_json


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} GiB"


# ----------------------------------------------------------------------------------------------------------------
# Shared pieces


def _read(args: argparse.Namespace, source: str | None = None) -> tuple[Any, Any]:
    from offload_lab.fit import checkpoint

    opts = checkpoint.RemoteOptions(concurrency=args.concurrency, retries=args.retries)
    ckpt = checkpoint.read_checkpoint(source or args.source, opts, hf_endpoint=args.hf_endpoint)
    cls = checkpoint.classify(ckpt, args.architecture, args.engram_pattern)
    return ckpt, cls


def _parallelism(args: argparse.Namespace) -> Any:
    from offload_lab.fit import memory

    return memory.Parallelism(tp=args.tp, ep=args.ep, placement=args.placement,
                              tp_modes=memory.parse_tp_modes(args.tp_mode or []))


def _add_source_options(p: argparse.ArgumentParser) -> None:
    from offload_lab.fit.checkpoint import DEFAULT_ENGRAM_PATTERN, RULESETS

    g = p.add_argument_group("reading the checkpoint")
    g.add_argument("--architecture", choices=sorted(RULESETS), default=None,
                   help="tensor naming rules to classify with (default: from config.json, else from the names)")
    g.add_argument("--engram-pattern", default=DEFAULT_ENGRAM_PATTERN,
                   help=f"regular expression naming Engram lookup tables (default: {DEFAULT_ENGRAM_PATTERN})")
    g.add_argument("--concurrency", type=int, default=16, help="shards read at once over HTTP (default: 16)")
    g.add_argument("--retries", type=int, default=4,
                   help="retries per remote file on connection errors, 429 and 5xx (default: 4)")
    g.add_argument("--hf-endpoint", default=None,
                   help="Hugging Face endpoint for hf:// sources (default: $HF_ENDPOINT or https://huggingface.co); "
                        "a token is read from $HF_TOKEN only and sent to this host only")


def _add_parallel_options(p: argparse.ArgumentParser, tp_required: bool = False) -> None:
    from offload_lab.fit.checkpoint import CATEGORIES

    g = p.add_argument_group("parallelism")
    g.add_argument("--tp", type=int, required=tp_required, default=None if tp_required else 1,
                   help="tensor-parallel GPUs" + ("" if tp_required else " (default: 1)"))
    g.add_argument("--ep", action="store_true",
                   help="expert parallelism over the --tp GPUs (vLLM --enable-expert-parallel): whole experts per GPU")
    g.add_argument("--placement", choices=("linear", "round_robin"), default="linear",
                   help="expert placement under --ep (vLLM --expert-placement-strategy; default: linear)")
    g.add_argument("--tp-mode", action="append", metavar="CATEGORY=shard|replicate",
                   help=f"override how a category splits under TP (categories: {', '.join(CATEGORIES)}); repeatable")


# ----------------------------------------------------------------------------------------------------------------
# audit


def cmd_audit(args: argparse.Namespace) -> int:
    from offload_lab.fit import checkpoint
    from offload_lab.fit import memory
    from offload_lab.fit import plan as planmod

    ckpt, cls = _read(args)
    par = _parallelism(args)
    model = memory.MemoryModel(cls, par, ckpt.config)
    result = checkpoint.summary(ckpt, cls)
    result["memory"] = {"without_plan": model.report(usable_gib=args.usable_gib,
                                                     reserve_gib=args.reserve_gib).to_dict()}
    problems: list[Any] = []
    if args.plan:
        plan = planmod.read_plan(args.plan)
        problems = planmod.check_plan(plan, cls, ckpt)
        errors = [p for p in problems if p.level == "error"]
        if errors:
            raise InputError(f"plan file {args.plan} does not fit this checkpoint:\n  " +
                             "\n  ".join(p.message for p in errors))
        result["memory"]["with_plan"] = model.report(plan.host_set(), usable_gib=args.usable_gib,
                                                     reserve_gib=args.reserve_gib).to_dict()
        result["plan"] = {"path": args.plan, **planmod.plan_summary(plan),
                          "warnings": [p.message for p in problems]}
    if ckpt.config:
        try:
            kv = memory.kv_cache(ckpt.config, args.tp)
            result["kv"] = {"kind": kv.kind, "bytes_per_token_per_gpu": kv.per_gpu_bytes,
                            "bytes_per_token_total": kv.total_bytes}
        except InputError as e:
            result["kv"] = {"error": str(e)}
    if args.json:
        _print_json(result)
    else:
        _print_audit(result, args)
    fits = [m["fits"] for m in result["memory"].values()]
    return 0 if fits[-1] is not False else 1


def _print_audit(r: dict[str, Any], args: argparse.Namespace) -> None:
    ck = r["checkpoint"]
    print(f"{ck['source']}: {ck['shards']} shard(s), {ck['tensors']:,} tensors, {ck['total_bytes'] / 2**30:.2f} GiB "
          f"(read {ck['fetched_bytes']:,} header bytes"
          + (f" in {ck['requests']} requests" if ck["requests"] else "") + f"); rules: {r['architecture']}")
    if ck.get("commit"):
        print(f"  revision {ck['revision']} = commit {ck['commit']}")
    print(f"  {'category':15} {'tensors':>9} {'GiB':>10}")
    for cat, v in r["categories"].items():
        if v["tensors"]:
            print(f"  {cat:15} {v['tensors']:>9,} {v['bytes'] / 2**30:>10.3f}")
    re_ = r["routed_experts"]
    if re_["experts"]:
        print(f"  routed experts: {re_['experts']:,} in {re_['layers']} layers (layers {re_['first_layer']}-"
              f"{re_['last_layer']}), {re_['bytes_per_expert_median'] / 2**20:.2f} MiB each (median)")
    for o in r["other"]["largest"][:5]:
        print(f"  other: {o['name']} ({o['bytes']:,} bytes)")
    for label, m in r["memory"].items():
        verdict = {True: "fits", False: "does NOT fit", None: "(no --usable-gib)"}[m["fits"]]
        print(f"  {label.replace('_', ' ')}: TP {m['tp']}{' EP' if m['ep'] else ''}: {_gib(m['per_gpu_gib'])} per GPU "
              f"against {_gib(m['usable_gib'])} usable, headroom {_gib(m['headroom_gib'])}"
              f" (reserve {m['reserve_gib']:g} GiB): {verdict}; host {_gib(m['host_gib_per_gpu'])} per GPU")
    if "kv" in r and "bytes_per_token_per_gpu" in r["kv"]:
        print(f"  KV cache ({r['kv']['kind']}): {r['kv']['bytes_per_token_per_gpu']:,} bytes per token per GPU")
    for w in r.get("plan", {}).get("warnings", []):
        print(f"  warning: {w}")


# ----------------------------------------------------------------------------------------------------------------
# plan


def cmd_plan_make(args: argparse.Namespace) -> int:
    from offload_lab.fit import memory
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    ckpt, cls = _read(args)
    model = memory.MemoryModel(cls, _parallelism(args), ckpt.config)
    counts = RoutingCounts.load(args.counts) if args.counts else None
    host_tensors = planmod.host_tensors_for(cls, args.host_category or [], args.host_tensor or [])
    mask = planmod.generate(model, args.generator, fraction=args.fraction, count=args.count, counts=counts,
                            usable_gib=args.usable_gib, reserve_gib=args.reserve_gib, host_tensors=host_tensors,
                            max_layer_fraction=args.max_layer_fraction, within=args.within)
    params = {k: getattr(args, k) for k in ("fraction", "count", "usable_gib", "reserve_gib", "max_layer_fraction",
                                            "within", "tp", "ep", "placement") if getattr(args, k) is not None}
    params["host_categories"] = args.host_category or []
    plan = planmod.make_plan(model, ckpt, args.generator, mask, host_tensors, params, counts=counts,
                             counts_path=Path(args.counts) if args.counts else None, model_name=args.model)
    hs = plan.host_set()
    report = model.report(hs, usable_gib=args.usable_gib, reserve_gib=args.reserve_gib)
    if counts is not None:
        bw = planmod.Bandwidth(args.hbm_gbps, args.link_gbps) if args.hbm_gbps and args.link_gbps else None
        plan.predicted = planmod.predict(model, hs, counts, bw)
    planmod.write_plan(plan, args.out)
    out = {"plan": args.out, **planmod.plan_summary(plan), "memory": report.to_dict(), "predicted": plan.predicted}
    if args.json:
        _print_json(out)
    else:
        m = report.to_dict()
        print(f"wrote {args.out}: {out['host_experts']:,} of {len(model.experts.keys):,} routed experts on host "
              f"({args.generator}), {len(host_tensors)} whole tensor(s); per GPU {_gib(m['per_gpu_gib'])}, "
              f"host {_gib(m['host_gib_per_gpu'])}")
        if plan.predicted:
            print(f"  expected host bytes per token {plan.predicted['host_bytes_per_token']:,.0f}, GPU hit rate "
                  f"{plan.predicted['gpu_hit_rate']:.3f}")
    return 0


def cmd_plan_check(args: argparse.Namespace) -> int:
    from offload_lab.fit import plan as planmod

    plan = planmod.read_plan(args.plan)
    ckpt, cls = _read(args)
    problems = planmod.check_plan(plan, cls, ckpt)
    errors = [p for p in problems if p.level == "error"]
    if args.json:
        _print_json({"plan": args.plan, "ok": not errors,
                     "problems": [{"level": p.level, "message": p.message} for p in problems]})
    else:
        for p in problems:
            print(f"{args.plan}: {p.level}: {p.message}", file=sys.stderr if p.level == "error" else sys.stdout)
        if not errors:
            print(f"{args.plan}: ok against {ckpt.source} ({len(plan.experts()):,} host experts, "
                  f"{len(plan.host_tensors)} host tensors)")
    return 2 if errors else 0


def cmd_plan_show(args: argparse.Namespace) -> int:
    from offload_lab.fit import memory
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    plan = planmod.read_plan(args.plan)
    out: dict[str, Any] = {"plan": args.plan, **planmod.plan_summary(plan),
                           "host_experts_per_layer": {k: len(v) for k, v in plan.host_experts.items()}}
    if args.checkpoint:
        ckpt, cls = _read(args, args.checkpoint)
        problems = planmod.check_plan(plan, cls, ckpt)
        if any(p.level == "error" for p in problems):
            raise InputError(f"plan file {args.plan} does not fit {args.checkpoint}; run `offload-lab plan check`")
        model = memory.MemoryModel(cls, _parallelism(args), ckpt.config)
        out["memory"] = model.report(plan.host_set(), usable_gib=args.usable_gib,
                                     reserve_gib=args.reserve_gib).to_dict()
        if args.counts:
            bw = planmod.Bandwidth(args.hbm_gbps, args.link_gbps) if args.hbm_gbps and args.link_gbps else None
            out["predicted"] = planmod.predict(model, plan.host_set(), RoutingCounts.load(args.counts), bw,
                                               batch=args.batch)
    elif args.counts:
        raise InputError("--counts needs --checkpoint (expert sizes come from the checkpoint's headers)")
    if args.json:
        _print_json(out)
        return 0
    print(f"{args.plan}: model {out['model'] or '-'}, generator {out['generator']} {out['parameters']}")
    print(f"  {out['host_experts']:,} host experts over {out['layers_with_host_experts']} layers "
          f"({out['host_experts_per_layer_min']}-{out['host_experts_per_layer_max']} per layer); "
          f"{len(out['host_tensors'])} host tensor(s)")
    if "memory" in out:
        m = out["memory"]
        print(f"  TP {m['tp']}{' EP' if m['ep'] else ''}: {_gib(m['per_gpu_gib'])} per GPU, host "
              f"{_gib(m['host_gib_per_gpu'])} per GPU, fits: {m['fits']}")
    if "predicted" in out:
        pr = out["predicted"]
        line = (f"  expected host bytes per token {pr['host_bytes_per_token']:,.0f} "
                f"({pr['host_share_of_routed_traffic']:.1%} of routed traffic), GPU hit rate {pr['gpu_hit_rate']:.3f}")
        if "tpot_lower_bound_ms" in pr:
            line += f", TPOT >= {pr['tpot_lower_bound_ms']:.3f} ms"
        print(line)
    return 0


# ----------------------------------------------------------------------------------------------------------------
# memory-math, checkpoint synth, routing collect


def cmd_memory_math(args: argparse.Namespace) -> int:
    from offload_lab.fit import memory

    params = memory.parse_count(args.params)
    inputs = memory.memory_math_inputs()
    rows = memory.memory_math(params, args.format, inputs)
    if args.json:
        _print_json(rows)
        return 0
    print(f"{params:,.0f} parameters; weights only, before KV cache and runtime")
    print(f"  {'format':8} {'bits/weight':>11} {'weight GB':>10} {'smallest memory':>16}")
    for r in rows:
        fit = f"{r['smallest_memory_gb']} GB" if r["smallest_memory_gb"] else "none listed"
        print(f"  {r['format']:8} {r['bits_per_weight']:>11.2f} {r['weight_gb']:>10.1f} {fit:>16}")
    print(f"  bits per weight: {inputs.bits_provenance}")
    print(f"  memory sizes: {inputs.sizes_provenance}")
    return 0


def cmd_checkpoint_synth(args: argparse.Namespace) -> int:
    from offload_lab.fit import synthetic

    spec = synthetic.load_spec(args.spec)
    info = synthetic.write_checkpoint(spec, args.out)
    info["parameters"] = synthetic.parameter_count(spec)
    if args.json:
        _print_json(info)
    else:
        print(f"wrote {info['shards']} sparse shard(s), {info['tensors']:,} tensors, "
              f"{info['apparent_bytes'] / 2**30:.1f} GiB apparent, {info['disk_bytes'] / 2**20:.1f} MiB on disk, "
              f"{info['parameters'] / 1e9:.1f}B parameters, into {args.out}")
    return 0


def cmd_routing_collect(args: argparse.Namespace) -> int:
    from offload_lab.fit import routing

    if args.texts:
        texts = [t for t in Path(args.texts).read_text(encoding="utf-8").split("\n\n") if t.strip()]
    else:
        texts = routing.corpus_paragraphs()
    collected = routing.collect_hf(args.model, texts, python=args.python, max_tokens=args.max_tokens)
    counts = routing.counts_from_collected(collected, model=args.name or Path(args.model).name,
                                           source={"texts_file": args.texts or "package corpus"})
    counts.save(args.out)
    out = {"out": args.out, "tokens": counts.tokens, "layers": counts.layers, "num_experts": counts.num_experts,
           "top_k": counts.top_k}
    if args.json:
        _print_json(out)
    else:
        print(f"wrote {args.out}: {counts.tokens:,} tokens over {len(texts)} texts, {len(counts.layers)} MoE layers "
              f"x {counts.num_experts} experts, top-{counts.top_k}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# Parsers


def add_parsers(sub: Any) -> None:
    """Register the subcommands on ``offload-lab``'s subparsers."""
    pa = sub.add_parser(
        "audit", help="read a checkpoint's tensor headers and say whether it fits the GPUs (with or without a plan)",
        description="Read every safetensors header of a checkpoint (a directory, a file, an http(s) URL or "
                    "hf://owner/name@revision; remote reads use range requests, no weights are downloaded), classify "
                    "each tensor, and compute the bytes each GPU must hold under tensor (or expert) parallelism, "
                    "with and without a plan file, against the usable memory per GPU. Exits 1 when it does not fit, "
                    "2 on bad input.")
    pa.add_argument("source", help="checkpoint directory, .safetensors file, http(s) URL, or hf://owner/name@revision")
    pa.add_argument("--usable-gib", type=float, required=True,
                    help="usable memory per GPU in GiB (what the driver reports, times gpu_memory_utilization)")
    pa.add_argument("--reserve-gib", type=float, default=0.0,
                    help="headroom a GPU must keep free for KV cache, activations and graphs (default: 0)")
    pa.add_argument("--plan", default=None, help="plan file: also compute the bytes per GPU with it applied")
    pa.add_argument("--json", action="store_true", help="print the full audit as JSON")
    _add_parallel_options(pa, tp_required=True)
    _add_source_options(pa)
    pa.set_defaults(func=cmd_audit)

    pp = sub.add_parser("plan", help="make, check or show plan files (which experts go to host RAM)",
                        description="Plan files list the (layer, expert) pairs and whole tensors a server keeps in "
                                    "pinned host RAM; format in docs/plan-files.md.")
    psub = pp.add_subparsers(dest="plan_command", metavar="ACTION")
    pm = psub.add_parser(
        "make", help="generate a plan for a checkpoint",
        description="Generate a plan: uniform (same share per layer), layer-order (whole layers from the first, as "
                    "vLLM UVA and llama.cpp -ncmoe), budget-fit (fewest experts so every GPU fits --usable-gib with "
                    "--reserve-gib free), activation-aware (coldest (layer, expert) pairs first, from --counts).")
    pm.add_argument("source", help="checkpoint (as for audit)")
    pm.add_argument("--generator", required=True, choices=("uniform", "layer-order", "budget-fit", "activation-aware"),
                    help="how to choose the host experts")
    pm.add_argument("--out", required=True, help="plan file to write (JSON)")
    pm.add_argument("--fraction", type=float, default=None, help="share of routed experts to move (0-1)")
    pm.add_argument("--count", type=int, default=None, help="number of routed experts to move (instead of --fraction)")
    pm.add_argument("--counts", default=None,
                    help="routing counts file (offload-lab routing collect); needed by activation-aware, used by "
                         "budget-fit and uniform --within coldest; its sha256 is recorded in the plan")
    pm.add_argument("--within", choices=("index", "coldest"), default="index",
                    help="uniform: which experts of a layer go first (default: evenly spaced ids)")
    pm.add_argument("--usable-gib", type=float, default=None, help="usable memory per GPU (budget-fit; also reported)")
    pm.add_argument("--reserve-gib", type=float, default=0.0, help="headroom budget-fit keeps free (default: 0)")
    pm.add_argument("--host-category", action="append", metavar="CATEGORY",
                    help="move every tensor of a category to host too (e.g. embedding, engram); repeatable")
    pm.add_argument("--host-tensor", action="append", metavar="NAME", help="move this tensor to host; repeatable")
    pm.add_argument("--max-layer-fraction", type=float, default=None,
                    help="cap on the share of one layer's experts on host (activation-aware, budget-fit)")
    pm.add_argument("--model", default=None, help="model name to record in the plan (default: from the source)")
    pm.add_argument("--hbm-gbps", type=float, default=None, help="with --counts: GPU memory GB/s for the TPOT bound")
    pm.add_argument("--link-gbps", type=float, default=None, help="with --counts: host-link GB/s for the TPOT bound")
    pm.add_argument("--json", action="store_true", help="print the plan's summary and memory as JSON")
    _add_parallel_options(pm)
    _add_source_options(pm)
    pm.set_defaults(func=cmd_plan_make)

    pc = psub.add_parser(
        "check", help="validate a plan against a checkpoint",
        description="Exit 2, naming each problem, when the plan lists a layer without routed experts, an expert that "
                    "does not exist, an expert or layer twice, or a host tensor that does not exist or belongs to a "
                    "routed expert. A different checkpoint layout than the plan was made for is a warning.")
    pc.add_argument("plan", help="plan file")
    pc.add_argument("source", help="checkpoint (as for audit)")
    pc.add_argument("--json", action="store_true", help="print the problems as JSON")
    _add_source_options(pc)
    pc.set_defaults(func=cmd_plan_check)

    ps = psub.add_parser(
        "show", help="summarise a plan; with a checkpoint, its memory; with routing counts, its predicted cost",
        description="Summarise a plan file. With --checkpoint: bytes per GPU with the plan. With --counts too: "
                    "expected bytes read from host per token and, with --hbm-gbps and --link-gbps, a lower bound "
                    "on the time per output token (formula in the offload_lab.fit.plan module docstring).")
    ps.add_argument("plan", help="plan file")
    ps.add_argument("--checkpoint", default=None, help="checkpoint the plan is for (as for audit)")
    ps.add_argument("--counts", default=None, help="routing counts file for the predicted cost")
    ps.add_argument("--usable-gib", type=float, default=None, help="usable memory per GPU")
    ps.add_argument("--reserve-gib", type=float, default=0.0, help="headroom to keep free (default: 0)")
    ps.add_argument("--hbm-gbps", type=float, default=None, help="GPU memory bandwidth, GB/s, for the TPOT bound")
    ps.add_argument("--link-gbps", type=float, default=None,
                    help="host-to-GPU read bandwidth (zero-copy over PCIe), GB/s, for the TPOT bound")
    ps.add_argument("--batch", type=int, default=1, help="tokens per decode step (default: 1, single stream)")
    ps.add_argument("--json", action="store_true", help="print JSON")
    _add_parallel_options(ps)
    _add_source_options(ps)
    ps.set_defaults(func=cmd_plan_show)

    pmm = sub.add_parser(
        "memory-math", help="weight size = parameters x bits per weight / 8 for GGUF formats, and the memory it needs",
        description="For each of llama.cpp's GGUF formats (bits per weight as the published community page uses "
                    "them), the weight size in GB (1e9 bytes) and the smallest common memory size that holds the "
                    "weights alone, before KV cache and runtime.")
    pmm.add_argument("--params", required=True, help="parameter count, e.g. 763.2B, 35.4M or 7.632e11")
    pmm.add_argument("--format", action="append", default=None, help="only this format (repeatable; default: all)")
    pmm.add_argument("--json", action="store_true",
                     help="print rows with keys format, bits_per_weight, weight_gb, smallest_memory_gb")
    pmm.set_defaults(func=cmd_memory_math)

    pck = sub.add_parser("checkpoint", help="synthetic header-only checkpoints",
                         description="Write checkpoints whose headers are exact and whose data are sparse holes.")
    cksub = pck.add_subparsers(dest="checkpoint_command", metavar="ACTION")
    pcs = cksub.add_parser(
        "synth", help="write a header-only synthetic checkpoint from a spec (a 300 GiB layout in a few MB of disk)",
        description="Write sparse safetensors shards, model.safetensors.index.json and config.json for the layout "
                    "a spec describes (configs/checkpoints/*.yaml). It holds no weights.")
    pcs.add_argument("spec", help="synthetic checkpoint spec (YAML)")
    pcs.add_argument("--out", required=True, help="new, empty directory to write into")
    pcs.add_argument("--json", action="store_true", help="print what was written as JSON")
    pcs.set_defaults(func=cmd_checkpoint_synth)

    pr = sub.add_parser("routing", help="routing counts for activation-aware plans",
                        description="Count how often each router sends a token to each (layer, expert).")
    rsub = pr.add_subparsers(dest="routing_command", metavar="ACTION")
    prc = rsub.add_parser(
        "collect", help="run a local Hugging Face MoE model's routers over texts (in the server environment's torch)",
        description="Teacher-forced forward passes in transformers with output_router_logits; top-k per token and "
                    "layer, summed. Runs in a Python with torch and transformers ($OFFLOAD_LAB_TORCH_PYTHON, else "
                    ".venvs/server/bin/python).")
    prc.add_argument("--model", required=True, help="model directory (e.g. models/tiny-qwen3-moe)")
    prc.add_argument("--out", required=True, help="routing counts file to write (JSON)")
    prc.add_argument("--texts", default=None,
                     help="text file, texts separated by blank lines (default: the package's English corpus)")
    prc.add_argument("--max-tokens", type=int, default=512, help="truncate each text to this many tokens")
    prc.add_argument("--python", default=None, help="Python with torch and transformers")
    prc.add_argument("--name", default=None, help="model name to record (default: the directory's name)")
    prc.add_argument("--json", action="store_true", help="print a summary as JSON")
    prc.set_defaults(func=cmd_routing_collect)


__all__ = ["add_parsers"]
