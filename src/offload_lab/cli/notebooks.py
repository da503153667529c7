"""``offload-lab notebooks``: keep each experiment notebook's parameters cell in step with its Params model."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import print_json
from offload_lab.core import paths
from offload_lab.core.errors import InputError


def cmd_notebooks_sync(args: argparse.Namespace) -> int:
    from offload_lab.experiments import cells

    root = paths.find_root()
    kinds = cells.experiment_notebooks(root)
    changed = [k for k in kinds if cells.sync_notebook(root, k, write=not args.check)]
    if args.json:
        print_json({"notebooks": kinds, "out_of_date" if args.check else "rewritten": changed})
    elif args.check:
        print(f"{len(kinds) - len(changed)} of {len(kinds)} notebooks have parameters cells in step with their models")
    else:
        print(f"rewrote the parameters cell of {len(changed)} of {len(kinds)} notebooks" +
              (f": {', '.join(changed)}" if changed else ""))
    if args.check and changed:
        raise InputError(f"parameters cells out of date in {', '.join(f'notebooks/{k}.ipynb' for k in changed)}; "
                         "run `offload-lab notebooks sync` and commit the notebooks")
    return 0


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "notebooks", help="rewrite (or --check) each experiment notebook's parameters cell from its Params model",
        description="Every experiment notebook's parameters cell is generated from offload_lab.experiments.<name>."
                    "params.Params, with the values the embedded campaign (else the reference campaign) gives it, so "
                    "that a hand run measures what the campaign measures and `papermill --help-notebook` shows the "
                    "same types and defaults.")
    nsub = p.add_subparsers(dest="notebooks_command", metavar="ACTION", required=True)
    s = nsub.add_parser("sync", help="rewrite the parameters cells that are out of date",
                        description="Rewrite every experiment notebook's parameters cell from its Params model.")
    s.add_argument("--check", action="store_true", help="change nothing; exit 2 when a cell is out of date")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_notebooks_sync)
