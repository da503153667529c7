"""The "will it fit" subcommands of ``offload-lab``: audit, memory-math, checkpoint synth, routing collect, and
(from cli/plan.py) plan make|check|show|export|import. Their flags are the fields of fit/requests.py; the work is
fit/commands.py's, each answer an Outcome (its JSON and its lines) that the bridge prints."""

from __future__ import annotations

from typing import Any

from offload_lab.cli.common import action_group, calling
from offload_lab.cli.fit_options import HOST_RAM, MEMORY, OUT, PARALLEL, SOURCE, more, options
from offload_lab.cli.model_options import Command, Option, add_commands

FIT, OUT_OF = "offload_lab.fit.commands", "offload_lab.fit.outcomes"


def add_parsers(sub: Any) -> None:
    """Register the subcommands on ``offload-lab``'s subparsers."""
    from offload_lab.cli.plan import add_plan_parser
    from offload_lab.fit import requests as rq

    add_commands(sub, [
        Command("audit", "read a checkpoint's tensor headers and say whether it fits the GPUs (with or without a plan)",
                calling(f"{FIT}:audit", f"{FIT}:audit_lines", code=lambda r: 0 if r["fits"] else 1), rq.Audit,
                ("source", "tp", "usable_gib", "with_plan", "pp", "pp_partition", *MEMORY[1:],
                                      *HOST_RAM, *PARALLEL[1:], *SOURCE),
                options("source", tp=Option(required=True, help="tensor-parallel GPUs"),
                        usable_gib=Option(required=True), from_config=Option(),
                        with_plan=Option(aliases=("--plan",), metavar="FILE")),
                more("The bytes each GPU holds under tensor (or expert, or pipeline) parallelism, with and without a "
                     "plan, against --usable-gib; each GPU keeps free the KV cache of --streams x --context tokens "
                     "and --reserve-gib; and the host RAM of the plan's pinned buffers. Remote sources are read with "
                     "range requests (headers only). Exits 1 when it does not fit (GPU or host), 2 on bad input, "
                     "3 when a server answers wrongly."),
                json="print the full audit as JSON"),
        Command("memory-math", "weight size = parameters x bits per weight / 8 for GGUF formats, and the memory it "
                "needs", calling("offload_lab.published.memory_page:memory_math_outcome"),
                rq.MemoryMath, options=options(format=Option(repeat=True, metavar="FORMAT")),
                description=more("For each of llama.cpp's GGUF formats, the weight size in GB (1e9 bytes) and the "
                                 "smallest memory on a ladder that holds the weights alone, before KV cache and "
                                 "runtime."),
                json="print the rows as JSON (keys in the docs)")])
    add_plan_parser(sub)
    add_commands(action_group(sub, "checkpoint", "synthetic header-only checkpoints",
                              "Write checkpoints whose headers are exact and whose data are sparse holes."), [
        Command("synth", "write a header-only synthetic checkpoint from a spec (a 300 GiB layout in a few MB of disk)",
                calling(f"{OUT_OF}:checkpoint_synth_outcome"), rq.CheckpointSynth, options=options("spec"),
                description=more("Sparse safetensors shards, their index and config.json for the layout a spec "
                                 "(configs/checkpoints/*.yaml) or a Hugging Face config.json describes; no weights."),
                json="print what was written as JSON")])
    add_commands(action_group(sub, "routing", "routing counts for activation-aware plans",
                              "Count how often each router sends a token to each (layer, expert)."), [
        Command("collect", "run a local Hugging Face MoE model's routers over texts (in the server environment's "
                "torch)", calling(f"{OUT_OF}:routing_collect_outcome"), rq.RoutingCollect,
                ("model_dir", *OUT, "texts", "max_tokens", "python", "name"),
                options(model_dir=Option(aliases=("--model",), metavar="DIR")),
                description=more("Teacher-forced forward passes with output_router_logits; top-k per token and layer, "
                                 "summed, in a Python with torch and transformers ($OFFLOAD_LAB_TORCH_PYTHON, else "
                                 ".venvs/server/bin/python)."),
                json="print a summary as JSON")])


__all__ = ["add_parsers"]
