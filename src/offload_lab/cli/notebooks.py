"""``offload-lab notebooks sync``: keep each experiment notebook's parameters cell in step with its Params model
(:func:`offload_lab.experiments.cells.sync_all`)."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import action_group, print_json
from offload_lab.cli.model_options import Command, add_commands


def cmd_notebooks_sync(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.experiments import cells

    result = cells.sync_all(p)
    line = result.pop("line")
    print_json(result) if args.json else print(line)
    if (err := cells.out_of_date(result)) is not None:
        raise err
    return 0


def add_parsers(sub: Any) -> None:
    from offload_lab.experiments.cells import SyncParams

    nsub = action_group(sub, "notebooks", "rewrite (or --check) each experiment notebook's parameters cell from its "
                        "Params model", "Every experiment notebook's parameters cell is generated from its Params "
                        "model, with the values the embedded campaign gives it (docs/adding-an-experiment.md).")
    nsub.required = True
    add_commands(nsub, [Command("sync", "rewrite the parameters cells that are out of date", cmd_notebooks_sync,
                                SyncParams, json="print the result as JSON")])
