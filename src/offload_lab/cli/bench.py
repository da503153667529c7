"""Subcommands of the load generator and its checks: ``bench`` (closed-loop streams, or an open-loop schedule),
``clock-check``, ``compare`` (and its alias ``compare-vllm``), ``scrape-cost`` and ``bench-data`` (regenerates
``data/bench/``). Handlers and
help texts live here, so that the shared CLI module only gains a call to :func:`add_parsers`."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import (
    MAX_SECONDS,
    MAX_STREAMS,
    MAX_TOKENS,
    nonneg_seconds,
    seconds,
    token_rate,
    finite_float,
    http_url,
    positive_float,
    positive_int,
    token_count,
)
from offload_lab.cli.common import print_json as _print_json
from offload_lab.cli.common import DATA_DIR
from offload_lab.cli.model_options import deprecated_alias, typed_flag
from offload_lab.load.bar import BAR_TOK_S, MARGIN


def int_list(text: str, flag: str, high: int = MAX_STREAMS) -> list[int]:
    values: list[int] = []
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        pass
    if not values or any(v < 1 or v > high for v in values):
        from offload_lab.core.errors import InputError

        raise InputError(f"{flag} {text!r} is not a comma-separated list of whole numbers from 1 to {high:,}, "
                         "e.g. 1,2,4")
    return values


def float_list(text: str, flag: str) -> list[float]:
    import math

    values: list[float] = []
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        pass
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        from offload_lab.core.errors import InputError

        raise InputError(f"{flag} {text!r} is not a comma-separated list of positive numbers, e.g. 2,4,8")
    return values


def _new_run(args: argparse.Namespace, experiment: str, params: dict[str, Any], **extra: Any) -> Any:
    from offload_lab.core import environment, runs

    return runs.new_run(args.data_dir, args.campaign, experiment, params, environment=environment.capture_environment(),
                        **extra)


class _Silent:
    """A progress sink that says nothing: with --json, stdout holds the JSON document only."""

    def count(self, label: str, done: int, total: int, unit: str) -> None:
        pass

    def phase(self, label: str, text: str) -> None:
        pass

    def end(self, label: str, text: str = "") -> None:
        pass


def _quiet(args: argparse.Namespace) -> Any:
    """Around a measurement: the library's progress lines go nowhere when the output is --json."""
    import contextlib

    from offload_lab.core import progress

    return progress.to(_Silent()) if args.json else contextlib.nullcontext()


def _show(args: argparse.Namespace, run: Any, payload: dict[str, Any], table: Any = None, fmt: str = ".4g") -> None:
    if args.json:
        _print_json({"run": str(run.path), **payload})
        return
    if table is not None:
        print(table.to_string(index=False, float_format=lambda x: f"{x:{fmt}}"))
    print(f"run directory: {run.path}")


# --- bench -------------------------------------------------------------------------------------------------------

def cmd_bench(args: argparse.Namespace) -> int:
    from offload_lab.core import runs
    from offload_lab.load import sweep as concurrency
    from offload_lab.load import closed_loop, workloads
    from offload_lab.load.endpoint import Endpoint

    from offload_lab.core.inputs import check_dir

    # Before the server is reached: a bad place or a bad list is the user's to fix, not the server's refusal.
    check_dir(args.data_dir, typed_flag(args, "data_dir", "--data-dir"), write=True)
    if not args.rates:
        int_list(args.streams, "--streams")
    endpoint = Endpoint(args.url)
    deadlines = {"connect_timeout_s": args.connect_timeout, "read_timeout_s": args.first_byte_timeout,
                 "request_deadline_s": args.request_deadline}
    if any(v is not None for v in deadlines.values()):
        import dataclasses

        endpoint = dataclasses.replace(endpoint, **{k: v for k, v in deadlines.items() if v is not None})
    spec = workloads.WorkloadSpec(
        regime=args.regime, output_tokens=args.output_tokens, prompt_tokens=args.prompt_tokens,
        prefix_tokens=args.prefix_tokens, suffix_tokens=args.suffix_tokens,
        initial_context_tokens=args.initial_context_tokens, turn_new_tokens=args.turn_new_tokens,
        think_time_s=args.think_time, block_size=args.block_size,
    )
    rule = closed_loop.StopRule(max_error_rate=args.max_error_rate, min_errors=args.min_errors,
                                max_consecutive_failures=args.max_consecutive_failures, scope=args.stop_scope,
                                window=args.stop_window)
    if args.rates:
        return _bench_open(args, endpoint, spec, rule)
    params = concurrency.SweepParams(
        workload=spec, streams=int_list(args.streams, "--streams"), requests_per_stream=args.requests_per_stream,
        bar_tok_s=args.bar, margin=args.margin, stop_rule=rule, workers=args.workers,
        defer_parse=not args.parse_inline)
    run = _new_run(args, "concurrency", params.model_dump(mode="json"), server=endpoint.record())
    with runs.finishing(run, stopped=(KeyboardInterrupt, concurrency.SweepStopped)), _quiet(args):
        verdict = concurrency.run_sweep(run, endpoint, params, progress=None if args.json else print)
    levels = concurrency.summarize_run(run.path)
    cols = ["streams", "workers", "ok_in_window", "achieved_concurrency", "tok_s_median", "tok_s_p5",
            "tpot_median_ms", "ttft_median_s", "holds_bar", "cache_misses", "client_health"]
    _show(args, run, {"verdict": verdict, "levels": levels.to_dict(orient="records")}, levels[cols], ".3g")
    if not args.json:
        print(f"held the bar of {args.bar:g} tok/s up to {verdict['held_bar_up_to_streams']} stream(s); "
              f"provisioning with a {args.margin:.0%} margin: {verdict['provisioning_streams']} stream(s)")
    return 0


def _bench_open(args: argparse.Namespace, endpoint: Any, spec: Any, rule: Any) -> int:
    from offload_lab.bench import open_loop as open_bench
    from offload_lab.core import runs
    from offload_lab.load import open_loop

    params = open_loop.OpenLoopParams(rates_rps=float_list(args.rates, "--rates"), requests=args.requests,
                                      duration_s=args.duration, arrival=args.arrival, burstiness=args.burstiness,
                                      seed=args.seed, max_concurrency=args.max_concurrency)
    run = _new_run(args, open_bench.EXPERIMENT, {"workload": spec.model_dump(mode="json"),
                                                 **params.model_dump(mode="json"), "bar_tok_s": args.bar},
                   server=endpoint.record())
    with runs.finishing(run), _quiet(args):
        table = open_bench.run_rates(run, endpoint, spec, params, args.bar, args.workers, stop_rule=rule,
                                     progress=None if args.json else print)
    cols = ["rate_rps", "achieved_rps", "ok", "tok_s_median", "send_late_ms_p99", "ttft_ms_p50_send",
            "ttft_ms_p50_sched", "ttft_ms_p99_send", "ttft_ms_p99_sched", "valid_open_loop"]
    knee = open_loop.knee(table.to_dict(orient="records"), args.bar)
    _show(args, run, {"knee_rps": knee, "rates": table.to_dict(orient="records")}, table[cols], ".3g")
    if not args.json:
        print(f"knee (median tok/s per stream below {args.bar:g}): {knee if knee is not None else 'not reached'}")
    return 0


# --- checks ------------------------------------------------------------------------------------------------------

def cmd_clock_check(args: argparse.Namespace) -> int:
    from offload_lab.bench import clock_check
    from offload_lab.core import runs

    streams = int_list(args.streams, "--streams")
    clients = [clock_check.ClientConfig.parse(c) for c in args.clients.split(",") if c.strip()]
    rates = float_list(args.rates, "--rates") if args.rates else [args.rate]
    run = _new_run(args, clock_check.EXPERIMENT,
                   {"streams": streams, "rates_tok_s": rates, "ttft_ms": args.ttft_ms, "tokens": args.output_tokens,
                    "requests_per_stream": args.requests_per_stream, "clients": [c.name for c in clients]})
    with runs.finishing(run), _quiet(args):
        summary = clock_check.run_clock_check(run, streams, rates[0], args.ttft_ms, args.output_tokens,
                                              args.requests_per_stream, progress=None if args.json else print,
                                              clients=clients, rates=rates, pin=not args.no_pin)
    cols = ["client", "rate_tok_s", "streams", "tok_s_error", "client_rate_error_median", "token_error_ms_p50",
            "token_error_ms_p99", "first_token_error_ms_p99", "itl_error_ms_p99", "lag_ms_p99", "worker_cpu_max",
            "client_cpu_ms_per_token", "client_runq_ms_per_token", "source_runq_ms_per_token", "verdict",
            "miss_share"]
    _show(args, run, {"levels": summary.to_dict(orient="records"), "targets": clock_check.TARGETS}, summary[cols])
    if not args.json:
        print("targets (absolute): " + ", ".join(f"{k} <= {v:g}" for k, v in clock_check.TARGETS.items()))
        for _, row in summary[summary["verdict"] != "pass"].iterrows():
            share = f" (the {row['miss_share']}'s share is larger)" if row["miss_share"] else ""
            print(f"  {row['client']} at {row['rate_tok_s']:g} tok/s, {row['streams']} stream(s): {row['missed']}"
                  f"{share}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from offload_lab.bench import compare
    from offload_lab.core import runs
    from offload_lab.load.endpoint import Endpoint
    from offload_lab.server import stack

    st = stack.load_stack(args.stack)
    params = args.compare_options.build(args, args.command)
    endpoint = Endpoint(args.url)
    model = endpoint.first_model()
    run = _new_run(args, compare.EXPERIMENT, params.model_dump(mode="json"), server=endpoint.record(),
                   stack=st.record())
    with runs.finishing(run), _quiet(args):
        out = compare.compare(run, endpoint, st.python, model, str(st.model_path), params,
                              server_cpus=st.spec.server.cpus, progress=None if args.json else print)
    _show(args, run, out)
    if not args.json:
        print(compare.table(out))
    return 0


def cmd_scrape_cost(args: argparse.Namespace) -> int:
    from offload_lab.bench import scrape_cost
    from offload_lab.core import runs
    from offload_lab.load.endpoint import Endpoint

    endpoint = Endpoint(args.url)
    run = _new_run(args, scrape_cost.EXPERIMENT, {"scrapes": args.scrapes, "pid": args.pid},
                   server=endpoint.record())
    with runs.finishing(run):
        out = scrape_cost.measure(endpoint, args.pid, args.scrapes)
        run.write_json("scrape_cost.json", out)
    _show(args, run, out)
    if not args.json:
        print(f"/metrics: {out['bytes']} bytes, {out['wall_ms_p50']:.1f} ms a scrape on the client; server CPU "
              f"{out['server_cpu_ms_per_scrape']} ms a scrape")
    return 0


def cmd_bench_data(args: argparse.Namespace) -> int:
    from offload_lab.bench import data as bench_data

    done = bench_data.regenerate(args.data_dir, parts=args.only.split(","), stack_file=args.stack, force=args.force,
                                 progress=None if args.json else print)
    if args.json:
        _print_json({"runs": {k: str(v) for k, v in done.items()}})
    else:
        for name, path in done.items():
            print(f"  {name}: {path}")
    return 0


# --- parsers -----------------------------------------------------------------------------------------------------

def _data_root(p: argparse.ArgumentParser, help_: str) -> None:
    """``--data-dir``, the data root's one name; ``--out`` was its name in these commands (kept, deprecated)."""
    deprecated_alias(p, "--out", p.add_argument("--data-dir", default=DATA_DIR, help=help_))


def _run_flags(p: argparse.ArgumentParser, json_help: str = "print JSON") -> None:
    _data_root(p, "data root the run directory is made under (default: %(default)s)")
    p.add_argument("--campaign", default="bench", help="campaign name for the run (default: bench)")
    p.add_argument("--json", action="store_true", help=json_help)


def int_at_least_2(text: str) -> int:
    from offload_lab.cli.common import int_at_least

    return int_at_least(2, MAX_TOKENS)(text)


Flag = tuple[str, Any, Any, str]  # name, type (None: a string; "switch": store_true), default, help
_SWITCH = "switch"


def _parser(sub: Any, name: str, help_: str, description: str, flags: list[Flag], func: Any,
            run_flags: bool = True) -> argparse.ArgumentParser:
    """A subcommand from a table of flags (one row each), so that every parser is declared the same way."""
    p = sub.add_parser(name, help=help_, description=description)
    for names, kind, default, text in flags:
        flag, *old = names.split("|")  # "--new|--old": the old spelling kept, hidden and deprecated
        if kind == _SWITCH:
            action = p.add_argument(flag, action="store_true", help=text)
        elif isinstance(kind, (list, tuple)):
            action = p.add_argument(flag, choices=list(kind), default=default, required=default is None, help=text)
        else:
            action = p.add_argument(flag, type=kind, default=default, required=default is _REQUIRED, help=text)
        for spelling in old:
            deprecated_alias(p, spelling, action)
    if run_flags:
        _run_flags(p)
    p.set_defaults(func=func)
    return p


_REQUIRED = object()
REGIMES = ("short", "cold_prefill", "shared_prefix", "private_context", "agent_turns")

BENCH_FLAGS: list[Flag] = [
    ("--url", http_url, _REQUIRED, "base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000"),
    ("--connect-timeout", seconds, None, "seconds to connect (default 5; env OFFLOAD_LAB_CONNECT_TIMEOUT_S)"),
    ("--first-byte-timeout", seconds, None, "seconds to the first data event, and of any silence (default 600; "
                                           "env OFFLOAD_LAB_FIRST_BYTE_TIMEOUT_S)"),
    ("--request-deadline", seconds, None, "seconds one whole request may take (default: the first-byte timeout + "
                                         "1 s per output token; env OFFLOAD_LAB_REQUEST_DEADLINE_S)"),
    ("--regime", REGIMES, None, "workload regime"),
    ("--streams", None, "1,2,4", "comma-separated stream counts (default: 1,2,4)"),
    ("--requests-per-stream", positive_int, 4, "requests (turns) per stream per level"),
    ("--output-tokens", int_at_least_2, 64, "tokens per reply, ignore_eos (default: 64)"),
    ("--prompt-tokens", token_count, 128, "short/cold_prefill: prompt length"),
    ("--prefix-tokens", token_count, 2048, "shared_prefix/private_context: context length"),
    ("--suffix-tokens", token_count, 32, "new tokens after the cached context"),
    ("--initial-context-tokens", token_count, 2048, "agent_turns: context at turn one"),
    ("--turn-new-tokens", token_count, 256, "agent_turns: new tokens per turn"),
    ("--think-time", nonneg_seconds, 0.0, "agent_turns: seconds between reply and next turn"),
    ("--block-size", positive_int, None, "KV block size (default: read from /metrics)"),
    ("--bar", token_rate, BAR_TOK_S, "bar, median output tok/s per stream (default: %(default)g)"),
    ("--margin", finite_float(0, 1, high_open=True), MARGIN, "provisioning margin over the bar (default: %(default).2f)"),
    ("--max-error-rate", finite_float(0, 1), 0.05, "stop rule: error rate (default: 0.05) ..."),
    ("--min-errors", positive_int, 2, "... with at least this many errors (default: 2)"),
    ("--max-consecutive-failures", positive_int, 5, "stop rule: failures in a row (default: 5)"),
    ("--stop-scope", ("level", "window", "sweep"), "level",
     "count the stop rule's errors per level (default), over --stop-window requests, or over the sweep"),
    ("--stop-window", positive_int, None, "requests in the stop rule's sliding window"),
    ("--workers", positive_int, None, "client worker processes (default: one per 32 streams, at most spare cores)"),
    ("--parse-inline", _SWITCH, None, "parse each stream as it ends (the old client), not at the level's end"),
    ("--rates", None, None, "open loop: comma-separated request rates (req/s) instead of --streams"),
    ("--requests", int_at_least_2, 40, "open loop: requests per rate (default: 40)"),
    ("--duration", nonneg_seconds, 0.0, "open loop: or seconds of arrivals per rate, when more"),
    ("--arrival", ("poisson", "gamma", "constant"), "poisson", "open loop: arrival pattern (default: poisson)"),
    ("--burstiness", positive_float, 1.0, "open loop: gamma shape (below 1: burstier than Poisson)"),
    ("--seed", int, 0, "open loop: schedule seed (default: 0)"),
    ("--max-concurrency", positive_int, None, "open loop: client cap on requests in flight (default: none)"),
]
CLOCK_FLAGS: list[Flag] = [
    ("--streams", None, "1,8,64", "comma-separated stream counts (default: 1,8,64)"),
    ("--rate", token_rate, 50.0, "tokens per second per stream (default: 50)"),
    ("--rates", None, None, "several source rates, comma-separated (overrides --rate)"),
    ("--clients", None, "w1", ("client configurations, comma-separated: wK (K worker processes, deferred "
                               "parsing) or wK-inline (default: w1)")),
    ("--ttft-ms", finite_float(0, MAX_SECONDS * 1000), 50.0, "source's delay before the first token (ms)"),
    ("--output-tokens|--tokens", int_at_least_2, 64, "output tokens per request (default: 64)"),
    ("--requests-per-stream", positive_int, 3, "requests per stream per level"),
    ("--no-pin", _SWITCH, False, ("leave the source and the client to the scheduler (default: with two or more "
                                  "CPUs, the source on the last, the client's processes on the others)")),
]
def _compare_parser(sub: Any, name: str, help_: str, description: str, tools: tuple[str, ...] | None) -> None:
    """``compare`` (every peer) or ``compare-vllm`` (``tools``): the server and stack flags here, the rest from
    CompareParams (bench/compare_spec.py), whose fields are typed once."""
    from offload_lab.bench.compare_spec import PEER_NAMES, CompareParams, check_tools
    from offload_lab.cli.model_options import Option, add_model_options

    p = _parser(sub, name, help_, description, [
        ("--url", http_url, _REQUIRED, "base URL of the running vLLM server"),
        ("--stack", None, "configs/stacks/embedded.yaml",
         "stack file: its Python runs vllm bench, its model is the tokenizer, its CPUs are the server's"),
    ], cmd_compare)
    tools_help = None if tools is None else f"peers beside this load generator: {', '.join(PEER_NAMES)} (default: " \
                                            f"{','.join(tools)})"
    p.set_defaults(compare_options=add_model_options(p, CompareParams, (
        "tools", "input_len", "output_len", "num_prompts", "concurrency", "rounds", "cache", "shared_blocks"), {
        "tools": Option(parse=lambda t: check_tools([x.strip() for x in t.split(",") if x.strip()]),
                        metavar="A,B,...", help=tools_help),
        "input_len": Option(flag="--prompt-tokens", aliases=("--input-len",)),
        "output_len": Option(flag="--output-tokens", aliases=("--output-len",))}))
    if tools is not None:
        p.set_defaults(tools=list(tools))


SCRAPE_FLAGS: list[Flag] = [
    ("--url", http_url, _REQUIRED, "base URL of the running server"),
    ("--pid", positive_int, None, "the server's process id (for its CPU)"),
    ("--scrapes", positive_int, 50, "scrapes to time (default: 50)"),
]
DATA_FLAGS: list[Flag] = [
    ("--only", None, "clock,open,vllm,vllm-open", "parts: clock, open, vllm, vllm-open (default: all)"),
    ("--stack", None, "configs/stacks/embedded.yaml", "stack file for the vLLM part"),
    ("--force", _SWITCH, None, "replace the existing runs of these experiments"),
    ("--json", _SWITCH, None, "print JSON"),
]


def add_parsers(sub: Any) -> None:
    _parser(sub, "bench", "sweep closed-loop streams (or open-loop rates) of one regime against a server",
            "Run N closed-loop streams of a regime for each N in --streams (prompts built to exact token counts with "
            "the server's /tokenize, caches primed before the clock starts), and report per level the median and p5 "
            "output tokens/s per stream over the window where all N are in flight, TPOT, TTFT, achieved "
            "concurrency, cache hits, /metrics, the client-health verdict and how many streams held the bar. With "
            "--rates, send an open-loop schedule (Poisson or gamma) at each rate instead, and report latencies from "
            "the send and from the schedule, and the knee. Writes a run directory under --data-dir/<campaign>/.",
            BENCH_FLAGS, cmd_bench)
    _parser(sub, "clock-check", "measure a calibrated token source to prove the load generator's clock",
            "Start a local token source that streams at a set rate per stream, measure it with each client "
            "configuration at each stream count, and report the rate and TPOT errors, the client-only rate error, "
            "the per-token timing error (arrival minus the source's send stamp, same monotonic clock), each "
            "worker's lag and CPU, the source's CPU, and a verdict per level (pass, or miss naming the figures over "
            "their targets, which it prints: rate error, client-only rate error, per-token p99 error). The newest "
            "ok run under data/bench/clock_check/ calibrates the client-health verdict of every sweep.", CLOCK_FLAGS,
            cmd_clock_check)
    compare_text = (
        "Run this load generator and its peers (`vllm bench serve` from the stack's server environment, AIPerf and "
        "GuideLLM from their own, made by `make peers-env`) on the same server in rounds of mirrored order (four "
        "by default), each tool and round with fresh prompts of the same shape, on the CPUs the server does not "
        "use. Each tool's window is divided by the server's own TTFT and TPOT histograms (/metrics, scraped just "
        "before and after it), and checked on the server: requests finished, tokens generated, prompt tokens "
        "served from cache. Prints each tool's ratios to the server and the TTFT it adds, a verdict per peer and "
        "figure (agree within 3%, differ, or refused with the reason), and the figures that are not comparable "
        "and why. Run it under `flock /tmp/offload-vllm.lock` when it shares the machine's vLLM.")
    _compare_parser(sub, "compare", "run vllm bench serve, AIPerf, GuideLLM and this load generator side by side, "
                    "drift removed", compare_text, None)
    _compare_parser(sub, "compare-vllm", "`compare --tools vllm`: this load generator beside vllm bench serve",
                    compare_text, ("vllm",))
    _parser(sub, "scrape-cost", "measure what one /metrics scrape costs the server (client time and server CPU)",
            "Watch the server's process tree idle, then time back-to-back GET /metrics; report the client time per "
            "scrape and the server CPU per scrape (less the idle rate), from /proc.", SCRAPE_FLAGS, cmd_scrape_cost)
    data = _parser(sub, "bench-data", "regenerate data/bench/: clock check, open-loop knee, and the vLLM cross-checks",
            "Run every benchmark behind data/bench/ with the settings the docs quote: the clock check (1, 8, 64, 256 "
            "streams; clients w1-inline, w1, w2; 50 and 200 tok/s), open-loop sweeps past the knee of a "
            "capacity-limited token source, and, on the embedded vLLM server (started here; run it under `flock "
            "/tmp/offload-vllm.lock`, as `make bench-data` does), `compare` of all four load generators at 1 and 4 "
            "streams (needs `make peers-env`) and the /metrics scrape cost. Refuses to add to existing runs of "
            "these benchmarks without --force (which "
            "removes them first).", DATA_FLAGS, cmd_bench_data, run_flags=False)
    _data_root(data, "data root; the runs go under DATA_DIR/bench/ (default: %(default)s)")


__all__ = ["add_parsers"]
