"""``offload-lab capacity`` and ``offload-lab profile``: flags from the models of :mod:`offload_lab.seats.commands`,
one call into it each, and its outcome printed as text or ``--json``. The rules: docs/seats-and-cost.md."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import show
from offload_lab.cli.model_options import Option, add_model_options, typed_flag

DOCS = "Details: docs/seats-and-cost.md."
OLD_EUR = ("--pod-eur-per-hour", "--seat-eur-per-month")  # the old spellings: prices in EUR
TIMING = {"window_hours": Option(metavar="HOURS"), "stream_tok_s": Option(metavar="TOK_S"),
          "prefill_tok_s": Option(metavar="TOK_S")}


def cmd_capacity(args: argparse.Namespace) -> int:
    from offload_lab.core.errors import InputError
    from offload_lab.seats import commands

    query = args.options.build(args, "capacity", **args.source.given(args))
    old = [f for f in OLD_EUR if f in (typed_flag(args, "pod_price", ""), typed_flag(args, "seat_price", ""))]
    if old and query.currency != "EUR":
        raise InputError(f"{' / '.join(old)} name prices in EUR, and --currency is {query.currency}; give "
                         "--pod-price and --seat-price instead")
    return show(args, commands.capacity(query))


def cmd_profile(args: argparse.Namespace) -> int:
    from offload_lab.seats import commands

    return show(args, commands.profile(args.options.build(args, "profile")))


def add_parsers(sub: Any) -> None:
    """Register ``capacity`` and ``profile`` on the top-level subparsers."""
    from offload_lab.seats.commands import CapacityQuery, ProfileQuery

    pcap = sub.add_parser("capacity", help="seats, pods and monthly cost for a team under the seat rule",
                          description="How many developers one pod serves and what a team costs, in --currency: "
                                      "one q (binomial, beta-binomial with --rho), or each developer's own q from "
                                      f"their usage files (Poisson-binomial, correlated with --rho). {DOCS}")
    source = add_model_options(pcap.add_mutually_exclusive_group(required=True), CapacityQuery, ("q", "profile"),
                               {"profile": Option(repeat=True, metavar="FILE")})
    opts = add_model_options(pcap, CapacityQuery, [f for f in CapacityQuery.model_fields if f not in source.flags],
                             TIMING | {"pod_price": Option(aliases=(OLD_EUR[0],), metavar="PRICE"),
                                       "seat_price": Option(aliases=(OLD_EUR[1],), metavar="PRICE"),
                                       "hours_per_month": Option(metavar="HOURS"), "currency": Option(metavar="CODE")})
    pcap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    pcap.set_defaults(func=cmd_capacity, options=opts, source=source)

    ppro = sub.add_parser("profile", help="check a usage profile and time it: hours generating, share of the "
                                          "period, q",
                          description="Validate a usage profile (the project's YAML, or `ccusage daily|session "
                                      f"--json`) and time it at the given rates. {DOCS}")
    opts = add_model_options(ppro, ProfileQuery, ("file", "window_hours", "sessions", "stream_tok_s", "prefill_tok_s"),
                             TIMING | {"file": Option(positional=True)})
    ppro.add_argument("--json", action="store_true", help="print JSON")
    ppro.set_defaults(func=cmd_profile, options=opts)
