"""``offload-lab campaign rehearse FILE``: a pod campaign run here against an emulated pod; flags from
:class:`~offload_lab.campaigns.rehearse_command.RehearseParams`, the work in campaigns/rehearse.py."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import print_json
from offload_lab.cli.model_options import Command, Option, add_commands


def cmd_campaign_rehearse(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.campaigns import rehearse_command as rc

    res = rc.run(p, log=(lambda s: None) if args.json else print)
    print_json(rc.record(res)) if args.json else print(rc.summary(res))
    return rc.exit_code(res)


def add_parser(csub: Any) -> None:
    from offload_lab.campaigns.rehearse_command import RehearseParams

    add_commands(csub, [Command(
        "rehearse", "run a pod campaign here against an emulated pod: what would fail, what it would cost",
        cmd_campaign_rehearse, RehearseParams, options={
            "file": Option(positional=True, metavar="FILE"), "overrides": Option(metavar="FILE"),
            "pod_model": Option(metavar="FILE"), "data_dir": Option(metavar="DIR"), "out": Option(metavar="DIR"),
            "time_scale": Option(metavar="S")},
        description="Run the campaign's notebooks, load generator, boots and paper build here against an emulated "
                    "pod (configs/pods/), after dry runs of every stack's install and plan steps; print each "
                    "experiment's outcome, its predicted pod minutes and cost, and every step that would fail (exit "
                    "4 when one would). See docs/rehearsal.md.",
        json="print the rehearsal's record as JSON")])
