"""The plan, checkpoint and routing commands' answers as the command line shows them: each an Outcome of
:mod:`offload_lab.fit.commands`' result (its JSON) and the lines the text display prints."""

from __future__ import annotations

from offload_lab.core.outcome import Outcome
from offload_lab.fit import requests as rq
from offload_lab.fit.commands import (checkpoint_synth, gib, plan_export, plan_import, plan_make, plan_show,
                                      routing_collect)


def plan_make_outcome(req: rq.PlanMake) -> Outcome:
    """:func:`plan_make` as the command shows it."""
    out, routed = plan_make(req)
    m, pr = out["memory"], out["predicted"]
    return Outcome(out, [f"wrote {req.out}: {out['host_experts']:,} of {routed:,} routed experts on host "
                         f"({req.generator}), {len(out['host_tensors'])} whole tensor(s); per GPU "
                         f"{gib(m['per_gpu_gib'])}, host {gib(m['host_gib_per_gpu'])}",
                         *([f"  expected host bytes per token {pr['host_bytes_per_token']:,.0f}, GPU hit "
                            f"rate {pr['gpu_hit_rate']:.3f}"] if pr else [])])


def plan_show_outcome(req: rq.PlanShow) -> Outcome:
    """:func:`plan_show` as the command shows it."""
    out = plan_show(req)
    lines = [f"{req.plan_file}: model {out['model'] or '-'}, generator {out['generator']} {out['parameters']}",
             f"  {out['host_experts']:,} host experts over {out['layers_with_host_experts']} layers "
             f"({out['host_experts_per_layer_min']}-{out['host_experts_per_layer_max']} per layer); "
             f"{len(out['host_tensors'])} host tensor(s)"]
    if m := out.get("memory"):
        lines.append(f"  TP {m['tp']}{' EP' if m['ep'] else ''}: {gib(m['per_gpu_gib'])} per GPU, host "
                     f"{gib(m['host_gib_per_gpu'])} per GPU, fits: {m['fits']}")
    if pr := out.get("predicted"):
        lines.append(f"  expected host bytes per token {pr['host_bytes_per_token']:,.0f} "
                     f"({pr['host_share_of_routed_traffic']:.1%} of routed traffic), GPU hit rate "
                     f"{pr['gpu_hit_rate']:.3f}" + (f", TPOT >= {pr['tpot_lower_bound_ms']:.3f} ms"
                                                    if "tpot_lower_bound_ms" in pr else ""))
    return Outcome(out, lines)


def plan_export_outcome(req: rq.PlanExport) -> Outcome:
    """:func:`plan_export` as the command shows it."""
    out = plan_export(req)
    return Outcome(out, [f"wrote {req.out} ({req.format}): {out['host_experts']:,} host experts in "
                         f"{out['layers']} layers; layer names from {out['names_from']}",
                         *([f"  {' '.join(out['args'])}"] if out.get("args") else []),
                         *(f"  not carried (the format has no place for it): {d}" for d in out["dropped"])])


def plan_import_outcome(req: rq.PlanImport) -> Outcome:
    """:func:`plan_import` as the command shows it."""
    out = plan_import(req)
    return Outcome(out, [f"wrote {req.out}: {out['host_experts']:,} host experts in "
                         f"{out['layers_with_host_experts']} layers, from {req.file} ({req.format})"])


def checkpoint_synth_outcome(req: rq.CheckpointSynth) -> Outcome:
    """:func:`checkpoint_synth` as the command shows it."""
    info = checkpoint_synth(req)
    return Outcome(info, [f"wrote {info['shards']} sparse shard(s), {info['tensors']:,} tensors, "
                          f"{info['apparent_bytes'] / 2**30:.1f} GiB apparent, {info['disk_bytes'] / 2**20:.1f} "
                          f"MiB on disk, {info['parameters'] / 1e9:.1f}B parameters, into {req.out}"])


def routing_collect_outcome(req: rq.RoutingCollect) -> Outcome:
    """:func:`routing_collect` as the command shows it."""
    out, texts = routing_collect(req)
    return Outcome(out, [f"wrote {req.out}: {out['tokens']:,} tokens over {texts} texts, {len(out['layers'])} MoE "
                         f"layers x {out['num_experts']} experts, top-{out['top_k']}"])
