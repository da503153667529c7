"""``offload-lab plan make|check|show|export|import``: plan files (which experts go to host RAM); the format is in
docs/plan-files.md, the flags are the fields of fit/requests.py, the work is fit/commands.py's. Registered by
cli/fit.py's ``add_parsers``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from offload_lab.cli.common import action_group, calling, print_json
from offload_lab.cli.fit_options import BANDWIDTH, HOST_RAM, MEMORY, OUT, PARALLEL, SOURCE, more, options
from offload_lab.cli.model_options import Command, add_commands

FIT = "offload_lab.fit.outcomes"


def cmd_plan_check(req: Any, args: argparse.Namespace) -> int:
    from offload_lab.fit import commands

    r = commands.plan_check(req)
    if args.json:
        print_json(r.out)
    else:
        for level, message in r.problems:
            print(f"{req.plan_file}: {level}: {message}", file=sys.stderr if level == "error" else sys.stdout)
        if r.ok:
            print(r.line)
    return 0 if r.ok else 2


def add_plan_parser(sub: Any) -> None:
    """Register ``plan`` and its actions on ``offload-lab``'s subparsers."""
    from offload_lab.fit import requests as rq

    psub = action_group(sub, "plan", "make, check, show, export or import plan files (which experts go to host RAM)",
                        "Plan files list the (layer, expert) pairs and whole tensors a server keeps in pinned host "
                        "RAM; format in docs/plan-files.md.")
    add_commands(psub, [
        Command("make", "generate a plan for a checkpoint", calling(f"{FIT}:plan_make_outcome"), rq.PlanMake,
                ("source", "generator", *OUT, "fraction", "count", "counts", "within", *MEMORY, "host_category",
                 "host_tensor", "max_layer_fraction", "model", *BANDWIDTH, *HOST_RAM, "no_host_limit", *PARALLEL,
                 *SOURCE), options("source"),
                more("Generators: uniform, layer-order, budget-fit (fewest experts so every GPU fits "
                     "--usable-gib), activation-aware (coldest first, from --counts). A plan too big for the host's "
                     "RAM is refused unless --no-host-limit."),
                json="print the plan's summary and memory as JSON"),
        Command("check", "validate a plan against a checkpoint", cmd_plan_check, rq.PlanCheck,
                ("plan_file", "source", "format", "written_from", *SOURCE), options("plan_file", "source"),
                more("Exit 2, naming each problem, when the plan lists a layer without routed experts, an expert or "
                     "host tensor that does not exist; another checkpoint layout is a warning. With --format, read "
                     "the file as the code that reads that format would."),
                json="print the problems as JSON"),
        Command("show", "summarise a plan; with a checkpoint, its memory; with routing counts, its predicted cost",
                calling(f"{FIT}:plan_show_outcome"), rq.PlanShow,
                ("plan_file", "checkpoint", "counts", *MEMORY, *BANDWIDTH, "batch", *PARALLEL, *SOURCE),
                options("plan_file"),
                more("With --counts, --hbm-gbps and --link-gbps: a lower bound on the time per output token "
                     "(formula in offload_lab.fit.predict)."), json="print JSON"),
        Command("export", "write a plan for an engine (dsv41-host-plan, vllm-cpu-offload, llama-cpp-ot)",
                calling(f"{FIT}:plan_export_outcome"), rq.PlanExport,
                ("plan_file", "format", "checkpoint", *OUT, *MEMORY, *PARALLEL, *SOURCE), options("plan_file"),
                more("Layer names from vLLM's model code for --checkpoint's architecture (or GGUF's names); a plan "
                     "the format cannot express is refused (exit 2); whole host tensors are listed as not carried."),
                json="print what was written as JSON"),
        Command("import", "read a plan in another stack's format (dsv41-host-plan) into an offload-lab plan",
                calling(f"{FIT}:plan_import_outcome"), rq.PlanImport,
                ("file", "format", *OUT, "checkpoint", "model", *SOURCE),
                options("file"), json="print the plan's summary as JSON")])
