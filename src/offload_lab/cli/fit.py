"""The "will it fit" subcommands of ``offload-lab``: audit, memory-math, checkpoint synth, routing collect, and
(from cli/plan.py) plan make|check|show|export|import. Registered by :func:`add_parsers` from ``cli.build_parser``;
kept here so that the shared CLI module only gains one line. Flag values are checked by argparse types (the message
names the flag); the library checks what needs the checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from offload_lab.cli.common import positive_int
from offload_lab.cli.common import print_json as _print_json
from offload_lab.cli.fit_options import (action_group, add_host_ram_options, add_memory_options, add_out_options,
                                         add_parallel_options, add_source_options, check_new_out, emit, fit_errors, gib,
                                         gpu_count, model_for, read)
from offload_lab.core import inputs
from offload_lab.core.errors import InputError


# ----------------------------------------------------------------------------------------------------------------
# audit


def cmd_audit(args: argparse.Namespace) -> int:
    from offload_lab.fit import checkpoint, host_ram, memory
    from offload_lab.fit import plan as planmod

    plan = planmod.read_plan(args.plan) if args.plan else None
    ckpt, cls = read(args)
    model = model_for(args, ckpt, cls)
    result = checkpoint.summary(ckpt, cls)
    result["params"] = _params(args, ckpt, cls)
    result["budget"] = args.budget
    sets = {"without_plan": memory.HostSet()}
    if plan is not None:
        problems = planmod.check_plan(plan, cls, ckpt)
        fit_errors(args.plan, problems, "this checkpoint")
        sets["with_plan"] = plan.host_set()
        result["plan"] = {"path": args.plan, **planmod.plan_summary(plan), "warnings": [p.message for p in problems]}
    result["memory"] = {k: model.report(hs, usable_gib=args.usable_gib, reserve_gib=args.reserve_gib).to_dict()
                        for k, hs in sets.items()}
    result["host_ram"] = {k: host_ram.host_ram(model, hs, args.host_ram_gib, args.host_reserve_gib,
                                               args.pinned_granularity, args.pinned == "pow2",
                                               args.pinned_max_round_mib).to_dict() for k, hs in sets.items()}
    if args.pp > 1:  # per stage, each stage's layers on its own --tp GPUs
        from offload_lab.server.multinode import parse_partition

        result["pipeline"] = {k: [st.to_dict() for st in memory.per_gpu_pipeline(
            cls, model.par, args.pp, parse_partition(args.pp_partition), hs, args.usable_gib, args.reserve_gib,
            ckpt.config)] for k, hs in sets.items()}
    if ckpt.config:
        try:
            kv = memory.kv_cache(ckpt.config, args.tp)
            result["kv"] = {"kind": kv.kind, "bytes_per_token_per_gpu": kv.per_gpu_bytes,
                            "bytes_per_token_total": kv.total_bytes}
        except InputError as e:
            result["kv"] = {"error": str(e)}
    last = list(sets)[-1]
    gpus = result["pipeline"][last] if args.pp > 1 else [result["memory"][last]]
    result["fits"] = all(g["fits"] is not False for g in gpus) and result["host_ram"][last]["fits"] is not False
    if args.json:
        _print_json(result)
    else:
        _print_audit(result)
    return 0 if result["fits"] else 1


def _params(args: argparse.Namespace, ckpt: Any, cls: Any) -> dict[str, Any]:
    from offload_lab.fit import hfcheckpoint

    lay = getattr(args, "_layout", None)
    if lay is not None:
        return {**lay.params(), "source": f"transformers {lay.model_class} on the meta device"}
    return hfcheckpoint.params_from_checkpoint(ckpt, cls)


def _print_audit(r: dict[str, Any]) -> None:
    ck = r["checkpoint"]
    if ck["kind"] == "config":
        print(f"{ck['source']}: {ck['tensors']:,} tensors from transformers' model of this config (meta device, no "
              f"weights), {ck['total_bytes'] / 2**30:.2f} GiB at the config's dtype; architecture {r['architecture']}")
    else:
        print(f"{ck['source']}: {ck['shards']} shard(s), {ck['tensors']:,} tensors, {ck['total_bytes'] / 2**30:.2f} "
              f"GiB (read {ck['fetched_bytes']:,} header bytes"
              + (f" in {ck['requests']} requests" if ck["requests"] else "") + f"); rules: {r['architecture']}")
    p = r.get("params") or {}
    if p.get("total"):
        print(f"  parameters: {p['total'] / 1e9:.2f}B total, {p['active'] / 1e9:.2f}B active per token "
              f"({p['active_without_input_embedding'] / 1e9:.2f}B without the input embedding; routed experts "
              f"{p['experts_per_token']} of {p['experts_per_layer']})")
    elif p.get("note"):
        print(f"  parameters: {p['note']}")
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
        print(f"  {label.replace('_', ' ')}: TP {m['tp']}{' EP' if m['ep'] else ''}: {gib(m['per_gpu_gib'])} per GPU "
              f"against {gib(m['usable_gib'])} usable, headroom {gib(m['headroom_gib'])}"
              f" (kept free {m['reserve_gib']:.2f} GiB): {verdict}; host {gib(m['host_gib_per_gpu'])} per GPU")
        h = r["host_ram"][label]
        if h["blocks"]:
            verdict = {True: "fits", False: "does NOT fit", None: "(no --host-ram-gib)"}[h["fits"]]
            print(f"    host RAM: {gib(h['exact_gib'])} exact, {gib(h['rounded_gib'])} with power-of-two pinned "
                  f"blocks (x{h['rounding_factor']:.3f}, {h['blocks']} blocks, {h['granularity']}); {h['allocation']} "
                  f"against {gib(h['host_ram_gib'])} (reserve {h['reserve_gib']:g} GiB): {verdict}")
    for label, stages in r.get("pipeline", {}).items():
        print(f"  {label.replace('_', ' ')}, pipeline parallel {len(stages)}:")
        for i, m in enumerate(stages):
            verdict = {True: "fits", False: "does NOT fit", None: "(no --usable-gib)"}[m["fits"]]
            print(f"    stage {i}: {gib(m['per_gpu_gib'])} per GPU, headroom {gib(m['headroom_gib'])}: {verdict}; "
                  f"host {gib(m['host_gib_per_gpu'])} per GPU")
    b = r.get("budget") or {}
    kv = b.get("kv") or {}
    if "bytes_per_gpu" in kv and kv.get("kind"):
        extra = (f", {kv['sliding_layers']} sliding-window layers of {kv['sliding_window']}" if kv["sliding_layers"]
                 else "") + (f", {kv['state_layers']} state layers" if kv["state_layers"] else "")
        print(f"  kept free per GPU: KV cache {kv['gib_per_gpu']:.2f} GiB ({kv['kind']}, {kv['streams']} stream(s) x "
              f"{kv['context']:,} tokens, {kv['full_layers']} full-attention layers{extra}) + activations/graphs "
              f"{b['activation_reserve_gib']:g} GiB ({b['activation_reserve_source']})")
    elif b:
        print(f"  kept free per GPU: activations/graphs {b['activation_reserve_gib']:g} GiB; KV cache: "
              f"{kv.get('error') or kv.get('note')}")
    if "kv" in r and "bytes_per_token_per_gpu" in r["kv"]:
        print(f"  KV cache ({r['kv']['kind']}): {r['kv']['bytes_per_token_per_gpu']:,} bytes per token per GPU")
    for w in r.get("plan", {}).get("warnings", []):
        print(f"  warning: {w}")


# ----------------------------------------------------------------------------------------------------------------
# memory-math, checkpoint synth, routing collect


def cmd_memory_math(args: argparse.Namespace) -> int:
    from offload_lab.fit import memory_math as mm

    params = mm.parse_count(args.params)
    inputs_ = mm.memory_math_inputs()
    rows = mm.memory_math(params, args.format, inputs_, ladder=args.ladder)
    lad = inputs_.ladder(args.ladder)
    rows, printed_note = _beside_page(params, rows, lad)
    if args.json:
        _print_json(rows)
        return 0
    print(f"{params:,.0f} parameters; weights only, before KV cache and runtime; ladder {lad.name} ({lad.unit})")
    beside = any("printed_weight_gb" in r for r in rows)
    head = f"  {'format':22} {'bits/weight':>11} {'weight GB':>10} {'smallest memory':>16}"
    print(head + (f" {'printed GB':>10} {'difference':>17} {'printed smallest':>16}" if beside else ""))
    for r in rows:
        fit = f"{r['smallest_memory_gb']} {lad.unit}" if r["smallest_memory_gb"] else "none listed"
        bits = "–" if r["bits_per_weight"] is None else f"{r['bits_per_weight']:.2f}"
        weight = "–" if r["weight_gb"] is None else f"{r['weight_gb']:.1f}"
        line = f"  {r['format']:22} {bits:>11} {weight:>10} {fit:>16}"
        if "printed_weight_gb" in r:
            diff = ("–" if r["weight_difference_gb"] is None else
                    f"{r['weight_difference_gb']:+.1f} GB ({r['weight_difference_pct']:+.2f}%)")
            same = "same" if r["smallest_memory_agrees"] else "DIFFERS"
            line += f" {r['printed_weight_gb']:>10.1f} {diff:>17} {r['printed_smallest_memory_gb']:>8} {lad.unit} {same}"
        print(line)
    print(f"  bits per weight: {inputs_.bits_provenance}")
    print(f"  memory sizes ({lad.name}): {lad.provenance}")
    if printed_note:
        print(f"  printed: {printed_note}")
    return 0


def _beside_page(params: float, rows: list[dict[str, Any]], lad: Any) -> tuple[list[dict[str, Any]], str | None]:
    """On the community page's ladder, set its printed rows beside the recomputed ones (when its transcription is
    here and the parameter count is the page's)."""
    from offload_lab.core import paths
    from offload_lab.fit import memory_math as mm
    from offload_lab.published import transcription

    if lad.name != mm.PAGE_LADDER:
        return rows, None
    path = paths.resolve_in_root(mm.PAGE_TRANSCRIPTION)
    if not path.is_file():
        return rows, f"the page's printed table ({mm.PAGE_TRANSCRIPTION}) is not here: recomputed rows only"
    t = transcription.load_transcription(path)
    page_params = next(float(f.value) * 1e9 for f in t.figures if f.key == mm.PAGE_PARAMS_KEY)  # type: ignore[arg-type]
    if abs(params - page_params) > 1e-6 * page_params:
        return rows, (f"the page's printed rows are for {page_params:,.0f} parameters, not {params:,.0f}: "
                      "not compared")
    table = t.tables[mm.PAGE_TABLE]
    printed = [dict(zip(table.columns, row)) for row in table.rows]
    return mm.beside_printed(rows, printed, lad), (
        f"{mm.PAGE_TRANSCRIPTION} (source {t.source}, sha256 {t.source_sha256[:12]}…); a weight reproduces the "
        f"printed one within {100 * mm.WEIGHT_TOLERANCE:g}%")


def cmd_checkpoint_synth(args: argparse.Namespace) -> int:
    from offload_lab.fit import synthetic

    from offload_lab.core.places import check_output

    check_output(args.out, "--out", "dir")  # before the spec is read: a bad place is refused at once
    if str(args.spec).endswith(".json") or Path(args.spec).is_dir() or "://" in str(args.spec):
        from offload_lab.fit import hfcheckpoint

        info = hfcheckpoint.write_synthetic(args.spec, args.out, args.shards)
    else:
        spec = synthetic.load_spec(args.spec)
        if args.shards:
            spec = spec.model_copy(update={"shards": args.shards})
        info = synthetic.write_checkpoint(spec, args.out)
        info["parameters"] = synthetic.parameter_count(spec)
    return emit(args, info, f"wrote {info['shards']} sparse shard(s), {info['tensors']:,} tensors, "
                            f"{info['apparent_bytes'] / 2**30:.1f} GiB apparent, {info['disk_bytes'] / 2**20:.1f} "
                            f"MiB on disk, {info['parameters'] / 1e9:.1f}B parameters, into {args.out}")


def cmd_routing_collect(args: argparse.Namespace) -> int:
    from offload_lab.fit import routing

    check_new_out(args.out, args.force)
    if not Path(args.model).is_dir():
        raise InputError(f"--model {args.model}: no such model directory (a Hugging Face model saved locally)")
    if args.texts:
        texts = [t for t in inputs.read_text(args.texts, "--texts file", inputs.DATA_MAX_BYTES).split("\n\n")
                 if t.strip()]
    else:
        texts = routing.corpus_paragraphs()
    collected = routing.collect_hf(args.model, texts, python=args.python, max_tokens=args.max_tokens)
    counts = routing.counts_from_collected(collected, model=args.name or Path(args.model).name,
                                           source={"texts_file": args.texts or "package corpus"})
    counts.save(args.out)
    out = {"out": args.out, "tokens": counts.tokens, "layers": counts.layers, "num_experts": counts.num_experts,
           "top_k": counts.top_k}
    return emit(args, out, f"wrote {args.out}: {counts.tokens:,} tokens over {len(texts)} texts, "
                           f"{len(counts.layers)} MoE layers x {counts.num_experts} experts, top-{counts.top_k}")


# ----------------------------------------------------------------------------------------------------------------
# Parsers


def add_parsers(sub: Any) -> None:
    """Register the subcommands on ``offload-lab``'s subparsers."""
    from offload_lab.cli.plan import add_plan_parser

    pa = sub.add_parser(
        "audit", help="read a checkpoint's tensor headers and say whether it fits the GPUs (with or without a plan)",
        description="Read every safetensors header of a checkpoint (a directory, a file, an http(s) URL or "
                    "hf://owner/name@revision; remote reads use range requests, no weights are downloaded), classify "
                    "each tensor, and compute the bytes each GPU must hold under tensor (or expert) parallelism, "
                    "with and without a plan file, against the usable memory per GPU; and the host RAM the plan's "
                    "pinned buffers take, exact and rounded up to powers of two as PyTorch's caching host allocator "
                    "does, against --host-ram-gib. Given a config.json instead, the tensors come from "
                    "transformers' model of it (meta device) and the audit adds total and active parameters. Each "
                    "GPU keeps free the KV cache of --streams x --context tokens and --reserve-gib. Exits 1 when it "
                    "does not fit (GPU or host), 2 on bad input.")
    pa.add_argument("source", help="checkpoint directory, .safetensors file, http(s) URL, or "
                                   "hf://owner/name@revision; or a Hugging Face config.json (a file, a folder "
                                   "without weights, its URL; --from-config for any source): tensors from "
                                   "transformers' model of it")
    add_memory_options(pa, usable_required=True)
    pa.add_argument("--plan", default=None, help="plan file: also compute the bytes per GPU with it applied")
    pa.add_argument("--json", action="store_true", help="print the full audit as JSON")
    pa.add_argument("--pp", type=gpu_count, default=1,
                    help="pipeline-parallel stages (vLLM --pipeline-parallel-size): the bytes each stage's GPUs hold, "
                         "layers split as vLLM splits them (default: 1)")
    pa.add_argument("--pp-partition", default=None, metavar="N,N,...",
                    help="layers per stage, as VLLM_PP_LAYER_PARTITION (default: vLLM's even split)")
    add_host_ram_options(pa)
    add_parallel_options(pa, tp_required=True)
    add_source_options(pa)
    pa.set_defaults(func=cmd_audit)

    add_plan_parser(sub)

    pmm = sub.add_parser(
        "memory-math", help="weight size = parameters x bits per weight / 8 for GGUF formats, and the memory it needs",
        description="For each of llama.cpp's GGUF formats (bits per weight as the published community page uses "
                    "them), the weight size in GB (1e9 bytes) and the smallest memory size on a ladder that holds "
                    "the weights alone, before KV cache and runtime. The output names the ladder. The default is "
                    "offload-lab's own ladder; on the community page's ladder each row is set beside the page's "
                    "printed row (weights, their difference, and whether the smallest memory agrees).")
    pmm.add_argument("--params", required=True, help="parameter count, e.g. 763.2B, 35.4M or 7.632e11")
    pmm.add_argument("--format", action="append", default=None, help="only this format (repeatable; default: all)")
    pmm.add_argument("--ladder", default=None,
                     help="ladder of memory sizes: offload-lab (the default, GiB) or community-page (powers of two of "
                          "decimal GB, as the page's table; adds the page's printed rows beside the recomputed ones)")
    pmm.add_argument("--json", action="store_true",
                     help="print rows with keys format, bits_per_weight, weight_gb, smallest_memory_gb, ladder, "
                          "ladder_unit; on the community page's ladder also printed_weight_gb, weight_difference_gb, "
                          "weight_difference_pct, weight_within_tolerance, printed_smallest_memory_gb, "
                          "smallest_memory_agrees")
    pmm.set_defaults(func=cmd_memory_math)

    cksub = action_group(sub, "checkpoint", "synthetic header-only checkpoints",
                         "Write checkpoints whose headers are exact and whose data are sparse holes.")
    pcs = cksub.add_parser(
        "synth", help="write a header-only synthetic checkpoint from a spec (a 300 GiB layout in a few MB of disk)",
        description="Write sparse safetensors shards, model.safetensors.index.json and config.json for the layout "
                    "a spec describes (configs/checkpoints/*.yaml), or for the model a Hugging Face config.json "
                    "describes (tensors from transformers' model built on the meta device). It holds no weights.")
    pcs.add_argument("spec", help="synthetic checkpoint spec (YAML), or a Hugging Face config.json (a file, a "
                                  "directory holding it, a URL or hf://owner/name@revision): the tensors of "
                                  "transformers' model of it")
    pcs.add_argument("--shards", type=positive_int, default=None,
                     help="shards to write (default: the spec's; for a config.json, one per 5 GiB)")
    pcs.add_argument("--out", required=True, help="new, empty directory to write into")
    pcs.add_argument("--json", action="store_true", help="print what was written as JSON")
    pcs.set_defaults(func=cmd_checkpoint_synth)

    rsub = action_group(sub, "routing", "routing counts for activation-aware plans",
                        "Count how often each router sends a token to each (layer, expert).")
    prc = rsub.add_parser(
        "collect", help="run a local Hugging Face MoE model's routers over texts (in the server environment's torch)",
        description="Teacher-forced forward passes in transformers with output_router_logits; top-k per token and "
                    "layer, summed. Runs in a Python with torch and transformers ($OFFLOAD_LAB_TORCH_PYTHON, else "
                    ".venvs/server/bin/python).")
    prc.add_argument("--model", required=True, help="model directory (e.g. models/tiny-qwen3-moe)")
    add_out_options(prc, "routing counts file (JSON)")
    prc.add_argument("--texts", default=None,
                     help="text file, texts separated by blank lines (default: the package's English corpus)")
    prc.add_argument("--max-tokens", type=positive_int, default=512, help="truncate each text to this many tokens")
    prc.add_argument("--python", default=None, help="Python with torch and transformers")
    prc.add_argument("--name", default=None, help="model name to record (default: the directory's name)")
    prc.add_argument("--json", action="store_true", help="print a summary as JSON")
    prc.set_defaults(func=cmd_routing_collect)


__all__ = ["add_parsers"]
