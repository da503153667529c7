"""What the "will it fit" commands (cli/fit.py, cli/plan.py) share: which fields of the requests in
:mod:`offload_lab.fit.requests` each group of flags is, and which of them ``--help`` leaves to docs/fit-commands.md
(so that a command's help fits a screen); the flags, their types, bounds and help come from the fields."""

from __future__ import annotations

import argparse
from dataclasses import replace

from offload_lab.cli.model_options import Option

DOCS = "docs/fit-commands.md"
SOURCE = ("architecture", "from_config", "weights", "format_for", "engram_pattern", "concurrency", "retries",
          "hf_endpoint")
PARALLEL = ("tp", "ep", "placement", "tp_mode")
MEMORY = ("usable_gib", "reserve_gib", "context", "streams")
BANDWIDTH = ("hbm_gbps", "link_gbps")
HOST_RAM = ("host_ram_gib", "host_reserve_gib", "pinned", "pinned_granularity", "pinned_max_round_mib")
OUT = ("out", "force")
# Left out of --help, named in the docs: how a checkpoint is read, and the finer points of TP and pinned memory.
HIDDEN = (*SOURCE, "placement", "tp_mode", "host_reserve_gib", "pinned", "pinned_granularity", "pinned_max_round_mib")
_SHOWN = {"tp_mode": Option(repeat=True, metavar="CATEGORY=shard|replicate"), "host_category":
          Option(repeat=True, metavar="CATEGORY"), "host_tensor": Option(repeat=True, metavar="NAME"),
          "format_for": Option(repeat=True, metavar="CATEGORY=FORMAT"), "weights": Option(metavar="FORMAT")}
_SHOWN |= {f: Option(metavar="GIB") for f in ("usable_gib", "reserve_gib", "host_ram_gib", "host_reserve_gib")}
_SHOWN |= {f: Option(metavar="GB/S") for f in BANDWIDTH} | {f: Option(metavar="SHARE") for f in ("fraction",
                                                                                                "max_layer_fraction")}
_SHOWN |= {f: Option(metavar="FILE") for f in ("out", "counts", "plan", "written_from", "texts", "checkpoint")}
_SHOWN |= {f: Option(metavar="NAME") for f in ("model", "name")} | {"pp_partition": Option(metavar="N,N,...")}


def options(*positional: str, **extra: Option) -> dict[str, Option]:
    """The Option of each field: ``positional`` ones without a flag, the hidden ones hidden, repeatable lists."""
    out = _SHOWN | {f: Option(positional=True, metavar=f.removesuffix("_file").upper()) for f in positional}
    out |= {f: replace(_SHOWN.get(f, Option()), help=argparse.SUPPRESS) for f in HIDDEN}
    return out | {f: replace(o, metavar=o.metavar or _SHOWN.get(f, o).metavar) for f, o in extra.items()}


def more(text: str) -> str:
    """A command's description, with the line that links its details."""
    return f"{text} Every option and what it does: {DOCS}."
