"""``offload-lab plan make|check|show|export|import``: plan files (which experts go to host RAM); the format is in
docs/plan-files.md. Registered by cli/fit.py's ``add_parsers``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from offload_lab.cli.common import print_json as _print_json
from offload_lab.cli.common import nonneg_int, positive_int
from offload_lab.cli.fit_options import (action_group, add_bandwidth_options, add_host_ram_options,
                                         add_memory_options, add_out_options,
                                         add_parallel_options, add_source_options, bandwidth, check_new_out, emit,
                                         fit_errors, gib, layer_share, model_for, read, share)
from offload_lab.core.errors import InputError


# ----------------------------------------------------------------------------------------------------------------
# plan


def cmd_plan_make(args: argparse.Namespace) -> int:
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    check_new_out(args.out, args.force)  # before any work: a refusal costs nothing
    ckpt, cls = read(args)
    model = model_for(args, ckpt, cls)
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
    host = _host_check(args, model, hs)
    if counts is not None:
        plan.predicted = planmod.predict(model, hs, counts, bandwidth(args))
    planmod.write_plan(plan, args.out)
    out = {"plan": args.out, **planmod.plan_summary(plan), "memory": report.to_dict(), "host_ram": host,
           "budget": args.budget, "predicted": plan.predicted}
    if args.json:
        _print_json(out)
    else:
        m = report.to_dict()
        print(f"wrote {args.out}: {out['host_experts']:,} of {len(model.experts.keys):,} routed experts on host "
              f"({args.generator}), {len(host_tensors)} whole tensor(s); per GPU {gib(m['per_gpu_gib'])}, "
              f"host {gib(m['host_gib_per_gpu'])}")
        if plan.predicted:
            print(f"  expected host bytes per token {plan.predicted['host_bytes_per_token']:,.0f}, GPU hit rate "
                  f"{plan.predicted['gpu_hit_rate']:.3f}")
    return 0


def _host_check(args: argparse.Namespace, model: Any, hs: Any) -> dict[str, Any]:
    """The plan's pinned host bytes (with the allocator's rounding) against the host's RAM: --host-ram-gib, else this
    machine's; a plan that does not fit is refused (exit 2) unless --no-host-limit."""
    from offload_lab.fit import host_ram

    limit = None if args.no_host_limit else (args.host_ram_gib or host_ram.this_host_ram_gib())
    hr = host_ram.host_ram(model, hs, limit, args.host_reserve_gib, args.pinned_granularity, args.pinned == "pow2",
                           args.pinned_max_round_mib)
    out = {**hr.to_dict(), "limit_source": "none (--no-host-limit)" if args.no_host_limit else
           "--host-ram-gib" if args.host_ram_gib else "this machine's RAM (/proc/meminfo MemTotal)"}
    if hr.fits is False:
        raise InputError(f"plan needs {hr.needed_bytes / 2**30:,.2f} GiB of pinned host RAM "
                         f"({'power-of-two blocks' if hr.rounding else 'exact blocks'}, {hr.blocks:,} of them; "
                         f"{hr.exact_bytes / 2**30:,.2f} GiB exact) but the host has {limit:,.2f} GiB"
                         f"{f' less {args.host_reserve_gib:g} GiB reserved' if args.host_reserve_gib else ''} "
                         f"({out['limit_source']}); not written. Give the host's RAM with --host-ram-gib, move fewer "
                         "experts, or --no-host-limit")
    return out


def cmd_plan_check(args: argparse.Namespace) -> int:
    from offload_lab.fit import plan as planmod

    if args.format != "offload-lab" or args.written_from:
        return _check_as(args)
    plan = planmod.read_plan(args.plan)
    ckpt, cls = read(args)
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


def _check_as(args: argparse.Namespace) -> int:
    """``plan check FILE SOURCE --format F [--written-from PLAN]``: read FILE as the code that reads F would."""
    from offload_lab.fit import plan as planmod
    from offload_lab.fit import plan_formats

    from offload_lab.fit import engine_plans

    expected = planmod.read_plan(args.written_from) if args.written_from else None
    if args.format in engine_plans.ENGINE_FORMATS:
        # The architecture's own layer names (vLLM's model code, GGUF's names): a plan keyed for another model's
        # layers is refused, naming the first key no layer reaches.
        names, ckpt, cls = _engine_names(args, args.source)
        view = engine_plans.read(args.plan, args.format, names)
        if expected is not None and view.ok:
            view.problems += plan_formats._differences(view, expected)
    else:
        ckpt, cls = read(args)
        n_exp = max((e for _, e in cls.expert_bytes()), default=-1) + 1
        view = plan_formats.read_as(args.plan, args.format, cls.moe_layers(), n_exp, expected=expected)
    out = {**view.summary(), "checkpoint": str(ckpt.source), "written_from": args.written_from}
    if args.json:
        _print_json(out)
    else:
        for problem in view.problems:
            print(f"{args.plan}: error: {problem}", file=sys.stderr)
        if view.ok:
            same = f", exactly the host experts of {args.written_from}" if expected is not None else ""
            print(f"{args.plan}: ok as {args.format} against {ckpt.source}: the offload part finds "
                  f"{out['layers_found']} of {out['moe_layers']} MoE layers, {out['host_experts']:,} host experts"
                  f"{same}")
    return 0 if view.ok else 2


def cmd_plan_show(args: argparse.Namespace) -> int:
    from offload_lab.fit import plan as planmod
    from offload_lab.fit.routing import RoutingCounts

    if args.counts and not args.checkpoint:
        raise InputError("--counts needs --checkpoint (expert sizes come from the checkpoint's headers)")
    plan = planmod.read_plan(args.plan)
    out: dict[str, Any] = {"plan": args.plan, **planmod.plan_summary(plan),
                           "host_experts_per_layer": {k: len(v) for k, v in plan.host_experts.items()}}
    if args.checkpoint:
        ckpt, cls = read(args, args.checkpoint)
        fit_errors(args.plan, planmod.check_plan(plan, cls, ckpt), f"{args.checkpoint}; run `offload-lab plan check`")
        model = model_for(args, ckpt, cls)
        out["memory"] = model.report(plan.host_set(), usable_gib=args.usable_gib,
                                     reserve_gib=args.reserve_gib).to_dict()
        if args.counts:
            out["predicted"] = planmod.predict(model, plan.host_set(), RoutingCounts.load(args.counts),
                                               bandwidth(args), batch=args.batch)
    if args.json:
        _print_json(out)
        return 0
    print(f"{args.plan}: model {out['model'] or '-'}, generator {out['generator']} {out['parameters']}")
    print(f"  {out['host_experts']:,} host experts over {out['layers_with_host_experts']} layers "
          f"({out['host_experts_per_layer_min']}-{out['host_experts_per_layer_max']} per layer); "
          f"{len(out['host_tensors'])} host tensor(s)")
    if "memory" in out:
        m = out["memory"]
        print(f"  TP {m['tp']}{' EP' if m['ep'] else ''}: {gib(m['per_gpu_gib'])} per GPU, host "
              f"{gib(m['host_gib_per_gpu'])} per GPU, fits: {m['fits']}")
    if "predicted" in out:
        pr = out["predicted"]
        line = (f"  expected host bytes per token {pr['host_bytes_per_token']:,.0f} "
                f"({pr['host_share_of_routed_traffic']:.1%} of routed traffic), GPU hit rate {pr['gpu_hit_rate']:.3f}")
        if "tpot_lower_bound_ms" in pr:
            line += f", TPOT >= {pr['tpot_lower_bound_ms']:.3f} ms"
        print(line)
    return 0


def _engine_names(args: argparse.Namespace, source: str) -> Any:
    from offload_lab.fit import engine_plans

    from offload_lab.fit import memory

    ckpt, cls = read(args, source)
    if hasattr(args, "tp"):
        model = model_for(args, ckpt, cls)
    else:  # plan check: the names alone; bytes per GPU at one GPU
        model = memory.MemoryModel(cls, memory.Parallelism(tp=1), ckpt.config)
    return engine_plans.names_for(ckpt, cls, model, getattr(args, "_layout", None)), ckpt, cls


def cmd_plan_export(args: argparse.Namespace) -> int:
    from offload_lab.fit import engine_plans, hostplan
    from offload_lab.fit import plan as planmod

    check_new_out(args.out, args.force)
    plan = planmod.read_plan(args.plan)
    if args.checkpoint:
        names, _, cls = _engine_names(args, args.checkpoint)
        fit_errors(args.plan, planmod.check_plan(plan, cls), f"{args.checkpoint}; run `offload-lab plan check`")
        info = engine_plans.write(plan, args.format, names, args.out)
        out = {"out": args.out, "format": args.format, **info}
    elif args.format != hostplan.FORMAT_NAME:
        raise InputError(f"--format {args.format}: needs --checkpoint (the model's layer names and expert bytes "
                         "come from its config.json or checkpoint)")
    else:
        mapping, dropped = hostplan.to_host_plan(plan)
        hostplan.write_host_plan(mapping, args.out)
        out = {"out": args.out, "format": args.format, "layers": len(mapping),
               "host_experts": sum(len(v) for v in mapping.values()), "dropped": dropped,
               "layer_name": hostplan.KEY, "names_from": "DeepSeek-V4's (no --checkpoint)"}
    return emit(args, out, f"wrote {args.out} ({args.format}): {out['host_experts']:,} host experts in "
                           f"{out['layers']} layers; layer names from {out['names_from']}",
                *([f"  {' '.join(out['args'])}"] if out.get("args") else []),
                *(f"  not carried (the format has no place for it): {d}" for d in out["dropped"]))


def cmd_plan_import(args: argparse.Namespace) -> int:
    from offload_lab.fit import hostplan
    from offload_lab.fit import plan as planmod

    check_new_out(args.out, args.force)
    mapping = hostplan.read_host_plan(args.file)
    layers = experts = None
    ckpt = cls = None
    if args.checkpoint:
        ckpt, cls = read(args, args.checkpoint)
        layers = cls.moe_layers()
        experts = max((e for _, e in cls.expert_bytes()), default=-1) + 1
    plan = hostplan.from_host_plan(mapping, f"host plan {args.file}", model=args.model or "",
                                   source=args.checkpoint, moe_layers=layers, experts_per_layer=experts)
    if ckpt is not None:
        plan.checkpoint.fingerprint = ckpt.fingerprint()
        fit_errors(args.file, planmod.check_plan(plan, cls, ckpt), args.checkpoint)
    planmod.write_plan(plan, args.out)
    out = {"out": args.out, **planmod.plan_summary(plan)}
    return emit(args, out, f"wrote {args.out}: {out['host_experts']:,} host experts in "
                           f"{out['layers_with_host_experts']} layers, from {args.file} ({args.format})")


# ----------------------------------------------------------------------------------------------------------------
# Parsers


def add_plan_parser(sub: Any) -> None:
    """Register ``plan`` and its actions on ``offload-lab``'s subparsers."""
    from offload_lab.fit.generators import GENERATORS
    from offload_lab.fit.hostplan import FORMAT_NAME
    from offload_lab.fit.engine_plans import ENGINE_FORMATS
    from offload_lab.server.plan_spec import PLAN_FORMATS

    psub = action_group(sub, "plan", "make, check, show, export or import plan files (which experts go to host RAM)",
                        "Plan files list the (layer, expert) pairs and whole tensors a server keeps in pinned host "
                        "RAM; format in docs/plan-files.md.")
    pm = psub.add_parser(
        "make", help="generate a plan for a checkpoint",
        description="Generate a plan: uniform (same share per layer), layer-order (whole layers from the first, as "
                    "vLLM UVA and llama.cpp -ncmoe), budget-fit (fewest experts so every GPU fits --usable-gib with "
                    "--reserve-gib free), activation-aware (coldest (layer, expert) pairs first, from --counts). "
                    "An existing --out is refused unless --force is given.")
    pm.add_argument("source", help="checkpoint (as for audit)")
    pm.add_argument("--generator", required=True, choices=GENERATORS, help="how to choose the host experts")
    add_out_options(pm, "plan file (JSON)")
    pm.add_argument("--fraction", type=share, default=None, help="share of routed experts to move (0-1)")
    pm.add_argument("--count", type=nonneg_int, default=None,
                    help="number of routed experts to move (instead of --fraction)")
    pm.add_argument("--counts", default=None,
                    help="routing counts file (offload-lab routing collect); needed by activation-aware, used by "
                         "budget-fit and uniform --within coldest; its sha256 is recorded in the plan")
    pm.add_argument("--within", choices=("index", "coldest"), default="index",
                    help="uniform: which experts of a layer go first (default: evenly spaced ids)")
    add_memory_options(pm, what=" (budget-fit; also reported)")
    pm.add_argument("--host-category", action="append", metavar="CATEGORY",
                    help="move every tensor of a category to host too (e.g. embedding, engram); repeatable")
    pm.add_argument("--host-tensor", action="append", metavar="NAME", help="move this tensor to host; repeatable")
    pm.add_argument("--max-layer-fraction", type=layer_share, default=None,
                    help="cap on the share of one layer's experts on host, in (0, 1] (activation-aware, budget-fit)")
    pm.add_argument("--model", default=None, help="model name to record in the plan (default: from the source)")
    add_bandwidth_options(pm)
    add_host_ram_options(pm)
    pm.add_argument("--no-host-limit", action="store_true",
                    help="write the plan whatever host RAM its pinned buffers need (default: refuse a plan that "
                         "needs more than --host-ram-gib, or this machine's RAM)")
    pm.add_argument("--json", action="store_true", help="print the plan's summary and memory as JSON")
    add_parallel_options(pm)
    add_source_options(pm)
    pm.set_defaults(func=cmd_plan_make)

    pc = psub.add_parser(
        "check", help="validate a plan against a checkpoint",
        description="Exit 2, naming each problem, when the plan lists a layer without routed experts, an expert that "
                    "does not exist, or a host tensor that does not exist or belongs to a routed expert (problems "
                    "of one kind are counted, not listed one by one). A different checkpoint layout than the plan "
                    "was made for is a warning. What reading a plan refuses is in docs/plan-files.md. With --format, "
                    "read the file as the code that reads that format would (for dsv41-host-plan, the host-DMA "
                    "patch's lookup of each MoE layer) and exit 2 for a key no layer's lookup reaches, an entry that "
                    "is not a list of integer ids in range, or (--written-from) host experts other than the plan's.")
    pc.add_argument("plan", help="plan file")
    pc.add_argument("source", help="checkpoint (as for audit)")
    pc.add_argument("--format", choices=tuple(dict.fromkeys((*PLAN_FORMATS, *ENGINE_FORMATS))), default="offload-lab",
                    help="read the file as the code that reads this format would (a stack's plans.format): which "
                         "MoE layers it finds, which keys it never looks at, ids out of range or repeated")
    pc.add_argument("--written-from", default=None, metavar="PLAN",
                    help="the offload-lab plan the file was written from: the host experts must be exactly its")
    pc.add_argument("--json", action="store_true", help="print the problems as JSON")
    add_source_options(pc)
    pc.set_defaults(func=cmd_plan_check)

    ps = psub.add_parser(
        "show", help="summarise a plan; with a checkpoint, its memory; with routing counts, its predicted cost",
        description="Summarise a plan file. With --checkpoint: bytes per GPU with the plan. With --counts too: "
                    "expected bytes read from host per token and, with --hbm-gbps and --link-gbps, a lower bound "
                    "on the time per output token (formula in the offload_lab.fit.predict module docstring).")
    ps.add_argument("plan", help="plan file")
    ps.add_argument("--checkpoint", default=None, help="checkpoint the plan is for (as for audit)")
    ps.add_argument("--counts", default=None, help="routing counts file for the predicted cost")
    add_memory_options(ps)
    add_bandwidth_options(ps)
    ps.add_argument("--batch", type=positive_int, default=1, help="tokens per decode step (default: 1, single stream)")
    ps.add_argument("--json", action="store_true", help="print JSON")
    add_parallel_options(ps)
    add_source_options(ps)
    ps.set_defaults(func=cmd_plan_show)

    pe = psub.add_parser(
        "export", help="write a plan for an engine (dsv41-host-plan, vllm-cpu-offload, llama-cpp-ot)",
        description=f"Write the plan's host experts for an engine: {FORMAT_NAME}, the host-plan.json the public "
                    "dsv41 stack's host-DMA patch reads (EXL3_HOST_EXPERTS), keyed by the layer names vLLM gives the "
                    "--checkpoint's architecture; vllm-cpu-offload, upstream vLLM's --cpu-offload-gb and "
                    "--cpu-offload-params; llama-cpp-ot, llama.cpp's --override-tensor pattern over GGUF names. A "
                    "plan the format cannot express is refused (exit 2, naming the first layer). Whole host tensors "
                    "and metadata have no place in these formats and are listed as not carried.")
    pe.add_argument("plan", help="offload-lab plan file")
    pe.add_argument("--format", required=True, choices=ENGINE_FORMATS,
                    help="dsv41-host-plan (the host-DMA patch's JSON), vllm-cpu-offload (upstream vLLM's "
                         "--cpu-offload-gb/--cpu-offload-params, for the first K MoE layers whole) or llama-cpp-ot "
                         "(llama.cpp --override-tensor over GGUF names, whole layers)")
    pe.add_argument("--checkpoint", default=None,
                    help="the model (config.json or checkpoint, as for audit): layer names from vLLM's model code "
                         "for its architecture, expert bytes from it (default: DeepSeek-V4's names, "
                         "dsv41-host-plan only)")
    add_out_options(pe, "file to write")
    add_memory_options(pe)
    add_parallel_options(pe)
    add_source_options(pe)
    pe.add_argument("--json", action="store_true", help="print what was written as JSON")
    pe.set_defaults(func=cmd_plan_export)

    pi = psub.add_parser(
        "import", help=f"read a plan in another stack's format ({FORMAT_NAME}) into an offload-lab plan",
        description=f"Read a {FORMAT_NAME} file (host-plan.json) and write an offload-lab plan. With --checkpoint, "
                    "its layers and expert ids are checked against the checkpoint and its fingerprint recorded.")
    pi.add_argument("file", help="host-plan.json")
    pi.add_argument("--format", required=True, choices=(FORMAT_NAME,), help="the format to read")
    add_out_options(pi, "offload-lab plan file")
    pi.add_argument("--checkpoint", default=None, help="checkpoint the plan is for (as for audit)")
    pi.add_argument("--model", default=None, help="model name to record in the plan")
    pi.add_argument("--json", action="store_true", help="print the plan's summary as JSON")
    add_source_options(pi)
    pi.set_defaults(func=cmd_plan_import)
