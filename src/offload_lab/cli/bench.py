"""``bench``, ``clock-check``, ``compare`` (and ``compare-vllm``), ``scrape-cost``, ``bench-data``: flags from the
models (bench/commands.py, load/, bench/compare_spec.py), one call into :mod:`offload_lab.bench.commands` each, and
its outcome printed as text or ``--json``. What each measures: docs/load-generator.md."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from offload_lab.bench import commands as bc
from offload_lab.cli.common import http_url, show
from offload_lab.cli.model_options import ModelOptions, Option, add_model_options

DOCS = "See docs/load-generator.md."


def _checked_dir(text: str) -> str:
    from offload_lab.core.inputs import check_dir

    return str(check_dir(text, "--data-dir", write=True))


PLACE = {"data_dir": Option(aliases=("--out",), parse=_checked_dir, metavar="DIR")}
URL = {"url": Option(parse=http_url, required=True, metavar="URL")}


def _progress(args: argparse.Namespace) -> Any:
    """With --json, stdout holds the JSON document only: no progress lines (bench.commands.quiet)."""
    return None if args.json else print


def _built(args: argparse.Namespace, key: str, **extra: Any) -> Any:
    return getattr(args, key).build(args, args.command, **extra)


def cmd_bench(args: argparse.Namespace) -> int:
    workload, rule = _built(args, "workload_options"), _built(args, "stop_options")
    streams = {} if "streams" in args.sweep_options.given(args) else {"streams": bc.BENCH_STREAMS}
    sweep = _built(args, "sweep_options", workload=workload, stop_rule=rule, **streams)
    open_loop = _built(args, "open_options") if args.rates_rps is not None else None
    return show(args, bc.bench(_built(args, "place"), _built(args, "server"), sweep, open_loop,
                                progress=_progress(args)))


def cmd_clock_check(args: argparse.Namespace) -> int:
    return show(args, bc.clock_check(_built(args, "place"), _built(args, "params"), progress=_progress(args)))


def cmd_compare(args: argparse.Namespace) -> int:
    return show(args, bc.compare(_built(args, "place"), _built(args, "server").url, _built(args, "stack_choice").stack,
                                  _built(args, "params"), progress=_progress(args)))


def cmd_scrape_cost(args: argparse.Namespace) -> int:
    return show(args, bc.scrape_cost(_built(args, "place"), _built(args, "server").url, _built(args, "params")))


def cmd_bench_data(args: argparse.Namespace) -> int:
    return show(args, bc.bench_data(_built(args, "place"), _built(args, "stack_choice").stack, _built(args, "params"),
                                    progress=_progress(args)))


# --- parsers -----------------------------------------------------------------------------------------------------

class _Screen(argparse.HelpFormatter):
    """One line a flag (a wider flag column), and a docs path never split at its hyphen."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


def _parser(sub: Any, name: str, help_: str, docs: str, func: Any, models: dict[str, Any],
            place: tuple[str, ...] = ("data_dir", "campaign")) -> argparse.ArgumentParser:
    """A subcommand whose flags come from ``models`` (key -> (model, fields, options)); each ModelOptions lands in
    ``args.<key>`` for the handler to build its model from."""
    needed = " --url URL" * ("server" in models) + " --regime REGIME" * ("workload_options" in models)
    # One line a flag, so that --help fits a screen; what each does at length is in the docs it names.
    p = sub.add_parser(name, help=help_, description=f"{help_[:1].upper()}{help_[1:]}. {docs}",
                       usage=f"%(prog)s{needed} [option ...]",
                       formatter_class=_Screen)
    made: dict[str, ModelOptions] = {}
    for key, (model, fields, options) in (models | {"place": (bc.RunPlace, place, PLACE)}).items():
        made[key] = add_model_options(p, model, fields, options)
    p.add_argument("--json", action="store_true", help="print JSON")
    # Each ModelOptions sits in args under its key: a key that is also a flag's destination would replace that flag's
    # "not given" with the ModelOptions itself (compare's --stack once read one as a stack file).
    clash = set(made) & {a.dest for a in p._actions}
    assert not clash, f"{name}: model keys {sorted(clash)} are also flag destinations"
    p.set_defaults(func=func, **made)
    return p


def add_parsers(sub: Any) -> None:
    from offload_lab.bench.compare_spec import PEER_NAMES, CompareParams, check_tools
    from offload_lab.load.closed_loop import StopRule
    from offload_lab.load.open_loop import OpenLoopParams
    from offload_lab.load.sweep import SweepParams
    from offload_lab.load.workloads import WorkloadSpec

    ints, floats = partial(bc.int_list, flag="--streams"), partial(bc.float_list, flag="--rates")
    server = (bc.Server, tuple(bc.Server.model_fields), URL | {
        "connect_timeout_s": Option(flag="--connect-timeout"), "read_timeout_s": Option(flag="--first-byte-timeout"),
        "request_deadline_s": Option(flag="--request-deadline")})
    _parser(sub, "bench", "sweep closed-loop streams or open-loop rates of a regime on a server", DOCS,
            cmd_bench, {
                "server": server,
                "workload_options": (WorkloadSpec, tuple(WorkloadSpec.model_fields), {
                    "regime": Option(required=True, metavar="REGIME"), "think_time_s": Option(flag="--think-time")}),
                "sweep_options": (SweepParams, ("streams", "requests_per_stream", "bar_tok_s", "margin", "workers",
                                                "defer_parse"), {
                    "streams": Option(parse=ints, metavar="A,B,...", help="comma-separated stream counts (default: "
                                      + ",".join(map(str, bc.BENCH_STREAMS)) + ")"),
                    "bar_tok_s": Option(flag="--bar", metavar="TOK_S"), "margin": Option(metavar="FRACTION"),
                    "defer_parse": Option(flag="--parse-inline", help="parse streams as they end (the old client), "
                                                                      "not at the level's end")}),
                "stop_options": (StopRule, tuple(StopRule.model_fields), {
                    "scope": Option(flag="--stop-scope", metavar="SCOPE"), "window": Option(flag="--stop-window"),
                    "max_error_rate": Option(metavar="RATE")}),
                "open_options": (OpenLoopParams, ("rates_rps", "requests", "duration_s", "arrival", "burstiness",
                                                  "seed", "max_concurrency"), {
                    "rates_rps": Option(flag="--rates", parse=floats, metavar="A,B,..."),
                    "duration_s": Option(flag="--duration"), "arrival": Option(metavar="PATTERN"),
                    "burstiness": Option(metavar="SHAPE")}),
            })
    _parser(sub, "clock-check", "measure a calibrated token source to prove the load generator's clock", DOCS,
            cmd_clock_check, {"params": (bc.ClockCheckParams, tuple(bc.ClockCheckParams.model_fields), {
                "streams": Option(parse=ints, metavar="A,B,..."), "rates_tok_s": Option(
                    aliases=("--rates",), parse=partial(bc.float_list, flag="--rates-tok-s"), metavar="A,B,..."),
                "output_tokens": Option(aliases=("--tokens",)), "pin": Option(flag="--no-pin")})})
    for name, tools, help_ in (
            ("compare", None, "run vllm bench serve, AIPerf, GuideLLM and this load generator side by side, drift "
                              "removed"),
            ("compare-vllm", ("vllm",), "`compare --tools vllm`: this load generator beside vllm bench serve")):
        tools_help = f"peers beside this load generator: {', '.join(PEER_NAMES)} (default: {','.join(tools)})" \
            if tools else None
        p = _parser(sub, name, help_, DOCS + " Run it under `flock /tmp/offload-vllm.lock` when it shares the "
                    "machine's vLLM.", cmd_compare, {"server": (bc.Server, ("url",), URL),
                                                      "stack_choice": (bc.StackChoice, ("stack",), {}),
                                                      "params": (CompareParams, tuple(CompareParams.model_fields), {
            "tools": Option(parse=lambda t: check_tools([x.strip() for x in t.split(",") if x.strip()]),
                            metavar="A,B,...", help=tools_help),
            "prompt_tokens": Option(aliases=("--input-len",)), "output_tokens": Option(aliases=("--output-len",))})})
        if tools:
            p.set_defaults(tools=list(tools))
    _parser(sub, "scrape-cost", "measure what one /metrics scrape costs the server (client time and server CPU)",
            DOCS, cmd_scrape_cost, {"server": (bc.Server, ("url",), URL),
                                          "params": (bc.ScrapeCostParams, ("pid", "scrapes"), {})})
    _parser(sub, "bench-data", "regenerate data/bench/: clock check, open-loop knee, and the vLLM cross-checks",
            DOCS + " Run it under `flock /tmp/offload-vllm.lock`, as `make bench-data` does.", cmd_bench_data,
            {"stack_choice": (bc.StackChoice, ("stack",), {}), "params": (bc.BenchDataParams, ("only", "force"), {})},
            place=("data_dir",))


__all__ = ["add_parsers"]
