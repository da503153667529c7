"""``offload-lab report CAMPAIGN``: one self-contained interactive HTML file of every run of a campaign; flags from
:class:`~offload_lab.paper.report_command.ReportParams`, the work in :func:`~offload_lab.paper.report_command.
write_report` (docs/report.md)."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import print_json
from offload_lab.cli.model_options import Command, Option, add_commands


def cmd_report(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.paper import report_command

    written = report_command.write_report(p)
    lines = report_command.summary(written, p.campaign, p.vllm_json)
    if args.json:
        print_json(written.record())
        lines = lines[2:]  # the --vllm-json line still follows, as it always has
    print(*lines, sep="\n")
    return 0


def add_parsers(sub: Any) -> None:
    from offload_lab.paper.report_command import ReportParams

    add_commands(sub, [Command(
        "report", "write one self-contained interactive HTML report of a campaign's runs", cmd_report, ReportParams,
        description="One HTML file (charts with hover, tables that filter; opens offline) of every run of a campaign. "
                    "What it shows and the --vllm-json fields: docs/report.md.",
        old_positional="campaign", options={"campaign": Option(metavar="NAME"), "vllm_json": Option(metavar="DIR"),
                                             "experiment": Option(repeat=True, metavar="NAME")},
        json="print what was written as JSON")])
