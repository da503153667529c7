"""``offload-lab pod plan|launch|merge|status|logs|down|ledger``: a campaign on rented pods through SkyPilot. Flags
from the models in :mod:`offload_lab.pods.commands`, one call into it, the result as text or ``--json``."""

from __future__ import annotations

from typing import Any

from offload_lab.cli.common import action_group, calling
from offload_lab.cli.model_options import Command, Option, add_commands

POD = "offload_lab.pods.outcomes"


def add_parsers(sub: Any) -> None:
    """Register ``pod plan|launch|merge|status|logs|down|ledger``; the details are in docs/runbook.md."""
    from offload_lab.pods import commands as c

    def call(func: Any) -> Any:
        return lambda p, args: func(p)

    pos = {name: Option(positional=True, metavar=name) for name in ("plan_dir", "target")}
    plan = {"campaign_file": Option(positional=True, metavar="campaign"), "sky_python": Option(metavar="PYTHON"),
            "plan_id": Option(metavar="ID"), "git_url": Option(metavar="URL"), "git_ref": Option(metavar="REF"),
            "max_cost": Option(metavar="USD"), "out": Option(metavar="DIR")}
    pos |= {"sky_python": plan["sky_python"]}
    add_commands(action_group(sub, "pod", "run a campaign on rented pods through SkyPilot; merge their data back",
                              "From a laptop with SkyPilot configured: write one SkyPilot task per pod, launch them, "
                              "bring their data back, take them down, and merge every pod's runs into one campaign "
                              "(docs/runbook.md)."), [
        Command("plan", "write SkyPilot task YAML for a campaign (one per pod) and print the commands",
                calling(f"{POD}:plan_outcome"),
                c.PodPlanParams, options=plan,
                description="Write <out>/<cluster>.yaml per pod (resources from the stack file's `pod:`) and "
                            "<out>/plan.json, and print the commands. Exit 2 for a stack a launcher cannot express, "
                            "a split the campaign cannot take, or a refused check (docs/runbook.md)."),
        Command("launch", "launch a campaign's pods through SkyPilot, follow them, bring each run home, merge",
                call(c.launch), c.PodLaunchParams, options=plan, json=None,
                description="Plan as `pod plan` (or resume a plan folder), launch, fetch each run, take each pod "
                            "down once its data is home, merge (docs/runbook.md). Exit 2: bad plan or missing "
                            "secret; 3: SkyPilot refused; 4: a pod did not finish or an experiment failed."),
        Command("merge", "merge the pods' fetched data into one campaign; record what the launcher says they cost",
                calling(f"{POD}:merge_outcome"), c.PodMergeParams, options=pos,
                description="Check every run of every pod against its manifest, refuse run ids seen twice, copy the "
                            "runs and ledger lines into --data-dir; with --cost-report one `pod` ledger line per "
                            "launch (docs/runbook.md)."),
        Command("status", "each pod of a plan: up or gone, its job, what is home, what is left, and the cost so far",
                calling(f"{POD}:status_outcome"), c.PodStatusParams, options=pos,
                description="Ask SkyPilot and read the plan folder: per pod its state and job, its launches, what is "
                            "home and left, and the cost so far (SkyPilot's catalog prices). Starts nothing."),
        Command("logs", "a pod's job log (sky logs / sky jobs logs), so far or followed", call(c.logs),
                c.PodLogsParams, options=pos, json=None,
                description="The log of the latest job the launcher started on the cluster, as SkyPilot keeps it."),
        Command("down", "take a plan's pods (or one) down, each only after a last fetch brought its data home",
                call(c.down), c.PodDownParams, options=pos, json=None,
                description="For each pod still up: refuse while its job runs; fetch its data; take it down only "
                            "when that worked (--force: anyway). Exit 3 when a pod was kept up."),
        Command("ledger", "the campaign's pods as the launcher reported them, with the price source",
                calling(f"{POD}:ledger_outcome"),
                c.PodLedgerParams, old_positional="campaign",
                description="Read the `pod` lines of <data>/<campaign>/ledger.jsonl: per launch the paid minutes, "
                            "cost, price source and sessions."),
    ])


__all__ = ["add_parsers"]
