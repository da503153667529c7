"""``offload-lab campaign run|check|ledger``: flags from the models in :mod:`offload_lab.campaigns.commands`, one
call into it, the result as text or ``--json``."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import action_group, calling, http_url, port_number
from offload_lab.cli.model_options import Command, Option, add_commands
from offload_lab.core.errors import InputError

CC = "offload_lab.campaigns.commands"


def cmd_campaign_run(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.campaigns import commands

    if p.quiet and args.json:
        raise InputError("campaign run: --quiet and --json are two displays; give one")
    commands.run(p, json=args.json)
    return 0


def add_parsers(sub: Any) -> Any:
    """The ``campaign`` group with ``run``, ``check`` and ``ledger``; returns the group (``rehearse`` adds to it)."""
    from offload_lab.campaigns import commands

    csub = action_group(sub, "campaign", "run or check a campaign of experiments",
                        "Campaigns list notebooks and their parameters (configs/campaigns/*.yaml; docs/runbook.md).")
    file = {"file": Option(positional=True, metavar="file")}
    add_commands(csub, [
        Command("run", "start the stack's server, execute every notebook, stop the server", cmd_campaign_run,
                commands.CampaignRunParams, options=file | {"url": Option(parse=http_url, metavar="URL"),
                                                               "port": Option(parse=port_number, metavar="PORT")},
                json="one JSON object per line on stdout for every event, for scripts",
                description="Execute each experiment's notebook into a new run directory with its manifest. A failing "
                            "notebook keeps its run marked failed and the campaign goes on with the experiments that "
                            "do not read its runs; at the end a summary names each failure and skip, and the exit "
                            "status is 4 if any experiment failed (docs/cli.md)."),
        Command("check", "validate a campaign file and its notebooks' parameters without running",
                calling(f"{CC}:check_outcome"), commands.CampaignCheckParams, options=file, json=None,
                description="Check every notebook and parameter, and that what each experiment reads is listed "
                            "before it; print those dependencies."),
        Command("ledger", "the campaign's sessions: pod, start, end, minutes and cost at the stack's price",
                calling(f"{CC}:ledger_outcome"), commands.LedgerParams, old_positional="campaign",
                json="print JSON (sessions and totals)",
                description="Read <data>/<campaign>/ledger.jsonl and print each session and the totals; a session "
                            "without an end line is shown as open and not counted."),
    ])
    return csub
