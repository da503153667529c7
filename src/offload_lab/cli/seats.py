"""``offload-lab capacity`` and ``offload-lab profile``: seats, pods and cost, and usage profiles. Every number flag
has a type that refuses NaN, infinities and values out of range naming the flag (:mod:`offload_lab.cli.common`)."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import finite_float, int_at_least, positive_int, price, probability, token_rate
from offload_lab.cli.common import finish_parser
from offload_lab.cli.common import print_json as _print_json

# A team above a million developers is a typo (1e12 was accepted and sized); the binomial sums stay cheap below it.
MAX_TEAM = 1_000_000


# --- capacity ----------------------------------------------------------------------------------------------------

def _currency(text: str) -> str:
    if not (len(text) == 3 and text.isalpha()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a three-letter currency code, e.g. EUR or USD")
    return text.upper()


def _with_aliases(func: Any) -> Any:
    """Fold the hidden EUR spellings into --pod-price / --seat-price (either spelling, not both)."""

    def run(args: argparse.Namespace) -> int:
        from offload_lab.core.errors import InputError

        args.eur_alias = False
        for new, old in (("pod_price", "pod_price_eur"), ("seat_price", "seat_price_eur")):
            if getattr(args, old, None) is not None:
                if getattr(args, new) is not None:
                    raise InputError(f"give --{new.replace('_', '-')} once (the old EUR spelling names the same price)")
                setattr(args, new, getattr(args, old))
                args.eur_alias = True
        return func(args)

    return run


def cmd_capacity(args: argparse.Namespace) -> int:
    from offload_lab.core.errors import InputError
    from offload_lab.seats import cost

    if args.pod_price is None or args.seat_price is None:
        raise InputError("capacity needs --pod-price (an hour) and --seat-price (a seat a month), both in --currency")
    currency = (args.currency or "EUR").upper()
    if args.eur_alias and currency != "EUR":
        raise InputError(f"--pod-eur-per-hour / --seat-eur-per-month are prices in EUR, and --currency is {currency}; "
                         "give --pod-price and --seat-price instead")
    prices = cost.Prices(args.pod_price, args.seat_price,
                         args.hours_per_month if args.hours_per_month is not None else cost.HOURS_PER_MONTH)
    q, q_from = args.q, "--q"
    if args.profile:
        if args.stream_tok_s is None:
            raise InputError("--profile needs --stream-tok-s, the per-stream output rate to time its tokens at")
        team = _team_from_profiles(args, prices, currency)
        if team is not None:
            return team
        from offload_lab.seats.profile import profile_timing
        from offload_lab.seats.usage_export import load_usage

        q = profile_timing(load_usage(args.profile[0])[0], args.stream_tok_s, args.prefill_tok_s).q
        q_from = f"profile {args.profile[0]}"
    if args.team is None:
        raise InputError("--team: give the developers in the team to size and cost")
    r = {"q_from": q_from, "currency": currency,
         **cost.quote(q, args.streams_per_pod, args.alpha, args.team, prices, rho=args.rho)}
    if args.json:
        _print_json(r)
        return 0
    cur = currency
    print(f"q = {r['q']:.4g} ({q_from}), {r['model']} model, alpha = {r['alpha']:g}")
    print(f"one pod of {r['streams_per_pod']} streams serves at most {r['seats_per_pod']} developers")
    print(f"a team of {r['team']} needs {r['streams_needed']} streams: {r['pods']} pod(s) with streams pooled "
          f"({r['pods_partitioned']} with each developer pinned to one pod); P(overflow) = "
          f"{r['overflow_probability']:.3g}")
    print(f"a pod costs {r['pod_eur_per_month']:,.2f} {cur} a month ({r['hours_per_month']:g} hours); break-even at "
          f"{r['break_even_seats']:.2f} subscriptions (smallest team that saves: {r['break_even_team']})")
    print(f"team: {r['team_eur_per_month_self_hosted']:,.2f} {cur} a month self-hosted against "
          f"{r['team_eur_per_month_subscriptions']:,.2f} {cur} in subscriptions; saving "
          f"{100 * r['saving_fraction']:.1f}%")
    return 0


def _team_from_profiles(args: argparse.Namespace, prices: Any, currency: str) -> int | None:
    """Several developers (several files, or a team export): each one's q, and the team's streams and pods from the
    Poisson-binomial of their unequal q. None when the files hold one developer (the usual path then)."""
    from offload_lab.core.errors import InputError
    from offload_lab.seats import cost, team as team_model
    from offload_lab.seats.profile import profile_timing
    from offload_lab.seats.usage_export import load_team_usage

    devs = load_team_usage(args.profile, args.window_hours, None)
    if len(devs) < 2:
        return None
    if args.rho:
        raise InputError("--rho with several developers' own q: the correlated model takes one q; simulate instead")
    if args.team is not None and args.team != len(devs):
        raise InputError(f"--team {args.team}: the usage files hold {len(devs)} developers; leave --team out (the "
                         "team is theirs) or give one developer's file to scale to a team")
    qs = [(name, profile_timing(prof, args.stream_tok_s, args.prefill_tok_s).q) for name, prof, _ in devs]
    q = [v for _, v in qs]
    streams = team_model.streams_needed(q, args.alpha)
    pods = team_model.pods_needed(q, args.streams_per_pod, args.alpha)
    c = cost.team_cost(len(q), pods, prices)
    r = {"model": "poisson-binomial", "developers": [{"name": n, "q": v} for n, v in qs], "team": len(q),
         "alpha": args.alpha, "streams_per_pod": args.streams_per_pod, "streams_needed": streams, "pods": pods,
         "overflow_probability": team_model.sf(pods * args.streams_per_pod, q), "mean_generating": sum(q),
         "currency": currency, "hours_per_month": prices.hours_per_month,
         "pod_per_month": prices.pod_eur_per_month, "seat_per_month": prices.seat_eur_per_month,
         "team_per_month_self_hosted": c.eur_per_month_self_hosted,
         "team_per_month_subscriptions": c.eur_per_month_subscriptions, "saving_fraction": c.saving_fraction}
    if args.json:
        _print_json(r)
        return 0
    for n, v in qs:
        print(f"  {n}: q = {v:.4g}")
    print(f"a team of {len(q)} (Poisson-binomial of their own q, {sum(q):.3g} generating on average) needs "
          f"{streams} streams at alpha = {args.alpha:g}: {pods} pod(s); P(overflow) = {r['overflow_probability']:.3g}")
    print(f"team: {c.eur_per_month_self_hosted:,.2f} {currency} a month self-hosted against "
          f"{c.eur_per_month_subscriptions:,.2f} {currency} in subscriptions; saving {100 * c.saving_fraction:.1f}%")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from offload_lab.seats.profile import profile_timing
    from offload_lab.seats.usage_export import load_usage

    prof, source = load_usage(args.file, args.window_hours, args.sessions)
    timing = profile_timing(prof, args.stream_tok_s, args.prefill_tok_s)
    published = prof.published.model_dump() if prof.published else None
    if args.json:
        _print_json({"profile": prof.name, "source": source, "provenance": prof.provenance.model_dump(),
                     "tokens": prof.tokens.model_dump(), "period_days": prof.period_days,
                     "active_days": prof.active_days, "sessions": prof.sessions, "window_hours": prof.window_hours,
                     "timing": timing.to_dict(), "published": published})
        return 0
    print(f"profile {prof.name} ({source['format']}; {prof.provenance.kind}: {prof.provenance.source}"
          f"{', ' + prof.provenance.section if prof.provenance.section else ''}) is valid")
    if source["format"] != "profile-yaml":
        print(f"  {prof.active_days:g} active days in {prof.period_days:g}, {prof.sessions} sessions; "
              f"{prof.provenance.note}")
    print(f"  {timing.hours_generating:.3g} hours generating in {prof.period_days:g} days "
          f"({100 * timing.fraction_of_period:.2f}% of the period); q = {timing.q:.4g} over a window of "
          f"{timing.window_hours_in_period:g} hours")
    if not timing.split_known:
        print(f"  (split {timing.split_basis}; output {timing.output_tokens_range[0]:,.0f} to "
              f"{timing.output_tokens_range[1]:,.0f} tokens)")
    if published:
        print(f"  published: {published}")
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``capacity`` and ``profile`` on the top-level subparsers."""
    pcap = sub.add_parser(
        "capacity", help="seats, pods and monthly cost for a team under the seat rule",
        description="How many developers one pod serves and what a team costs. A pod serves --streams-per-pod "
                    "streams at the bar; a developer is generating at a moment of the working window with chance q; "
                    "the seat rule accepts a chance of at most --alpha that more developers generate at once than "
                    "the pods have streams (Binomial(n, q), or beta-binomial with --rho > 0). Pods pool their streams "
                    "for the team. Prints seats_per_pod, pods, pod_eur_per_month, break_even_seats, "
                    "team_eur_per_month_self_hosted, team_eur_per_month_subscriptions, saving_fraction and more.")
    qsrc = pcap.add_mutually_exclusive_group(required=True)
    qsrc.add_argument("--q", type=probability,
                      help="chance a developer is generating at a moment of the window, e.g. 0.071")
    qsrc.add_argument("--profile", action="append",
                      help="usage profile YAML or ccusage JSON export to compute q from (needs --stream-tok-s); give "
                           "it again for each developer, or a team export {\"developers\": {name: export}}: the "
                           "team is then those developers, each with their own q (Poisson-binomial)")
    pcap.add_argument("--stream-tok-s", type=token_rate, default=None,
                      help="with --profile: output tokens/s per stream to time the profile's tokens at (the bar)")
    pcap.add_argument("--prefill-tok-s", type=token_rate, default=None,
                      help="with --profile: prefill tokens/s for its new input tokens (needed when it has some)")
    pcap.add_argument("--window-hours", type=finite_float(0, 24, low_open=True), default=8.0,
                      help="with a ccusage export: hours of the working window on each active day (default 8)")
    pcap.add_argument("--streams-per-pod", type=positive_int, required=True, help="streams one pod serves at the bar")
    pcap.add_argument("--alpha", type=finite_float(0, 1, low_open=True, high_open=True), required=True,
                      help="accepted chance that more developers generate at once than there are streams, e.g. 0.01")
    pcap.add_argument("--team", type=int_at_least(1, MAX_TEAM), default=None,
                      help="developers in the team to size and cost (with several developers' files: theirs)")
    pcap.add_argument("--pod-price", type=price, default=None, help="pod price an hour, in --currency")
    pcap.add_argument("--seat-price", type=price, default=None, help="subscription a seat a month, in --currency")
    pcap.add_argument("--currency", default="EUR", type=_currency,
                      help="the prices' currency, a three-letter code (default: EUR)")
    # the old spellings, prices in EUR (hidden; kept so that scripts go on working)
    pcap.add_argument("--pod-eur-per-hour", type=price, dest="pod_price_eur", help=argparse.SUPPRESS)
    pcap.add_argument("--seat-eur-per-month", type=price, dest="seat_price_eur", help=argparse.SUPPRESS)
    pcap.add_argument("--hours-per-month", type=finite_float(0, 744, low_open=True), default=None,
                      help="hours a pod is billed a month (default 730 = 24 x 365 / 12, run day and night)")
    pcap.add_argument("--rho", type=finite_float(0, 1, high_open=True), default=0.0,
                      help="intra-team correlation for the beta-binomial model (default 0: developers independent)")
    finish_parser(pcap, _with_aliases(cmd_capacity), json_help="print the result as one JSON object")

    ppro = sub.add_parser(
        "profile", help="check a usage profile and time it: hours generating, share of the period, q",
        description="Validate a usage profile and compute, at the given per-stream and prefill rates, the hours the "
                    "developer's agent spends generating, their share of the period, and q, the chance of generating "
                    "at a moment of the working window. FILE is the project's YAML profile (configs/profiles/*.yaml) "
                    "or your own usage: the JSON of `ccusage daily --json` or `ccusage session --json` (output = "
                    "outputTokens, new input = inputTokens + cacheCreationTokens, cached reads = cacheReadTokens; the "
                    "period and active days from the dates). A bad file (neither format, negative tokens, a window "
                    "longer than a day, ...) exits 2 naming it.")
    ppro.add_argument("file", help="usage profile YAML, e.g. configs/profiles/published-week.yaml, or a ccusage "
                                   "daily/session JSON export")
    ppro.add_argument("--window-hours", type=finite_float(0, 24, low_open=True), default=8.0,
                      help="for an export: hours of the working window on each active day (an export has none; "
                           "default 8)")
    ppro.add_argument("--sessions", type=positive_int, default=None,
                      help="for a ccusage daily export: sessions in the period (default: one a day)")
    ppro.add_argument("--stream-tok-s", type=token_rate, required=True, help="output tokens/s per stream, e.g. 40")
    ppro.add_argument("--prefill-tok-s", type=token_rate, default=None,
                      help="prefill tokens/s for new input tokens (needed when the profile has some)")
    finish_parser(ppro, cmd_profile, json_help="print JSON")
