"""The load generator's commands as one library call each (``bench``, ``clock-check``, ``compare``,
``scrape-cost``, ``bench-data``): the command line builds these models from its flags, calls one function and
prints the :class:`Outcome`. A parameter is typed once, here or in the model it belongs to (``WorkloadSpec``,
``StopRule``, ``SweepParams``, ``OpenLoopParams``, ``CompareParams``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Callable, Literal

from pydantic import AliasChoices, Field

from offload_lab.core.bounds import MAX_SECONDS, MAX_STREAMS, MAX_TOKEN_RATE, MAX_TOKENS
from offload_lab.core.errors import InputError
from offload_lab.core.commands import Params, data_dir_field
from offload_lab.core.outcome import Outcome

CAMPAIGN = "bench"
EMBEDDED_STACK = "configs/stacks/embedded.yaml"
BENCH_STREAMS = [1, 2, 4]
Part = Literal["clock", "open", "vllm", "vllm-open"]


def int_list(text: str, flag: str, high: int = MAX_STREAMS) -> list[int]:
    """``1,2,4`` as whole numbers from 1 to ``high``, else an InputError naming ``flag`` and the text."""
    values: list[int] = []
    with contextlib.suppress(ValueError):
        values = [int(x) for x in text.split(",") if x.strip()]
    if not values or any(v < 1 or v > high for v in values):
        raise InputError(f"{flag} {text!r} is not a comma-separated list of whole numbers from 1 to {high:,}, "
                         "e.g. 1,2,4")
    return values


def float_list(text: str, flag: str) -> list[float]:
    values: list[float] = []
    with contextlib.suppress(ValueError):
        values = [float(x) for x in text.split(",") if x.strip()]
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError(f"{flag} {text!r} is not a comma-separated list of positive numbers, e.g. 2,4,8")
    return values


class RunPlace(Params):
    """Where a command's run directory is made."""

    data_dir: str = data_dir_field()
    campaign: str = Field(CAMPAIGN, description="campaign the run is filed under")


class Server(Params):
    """The server measured and how long its answers may take (None: the environment's or the built-in default,
    docs/load-generator.md)."""

    url: str = Field(description="base URL of the server, e.g. http://127.0.0.1:8000")
    connect_timeout_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="seconds to connect (default 5)")
    read_timeout_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="seconds to the first event, and of any silence (default 600)")
    request_deadline_s: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="seconds a whole request may take (default: see the docs)")

    def endpoint(self) -> Any:
        from offload_lab.load.endpoint import Endpoint

        given = {k: v for k, v in self.model_dump(exclude={"url"}).items() if v is not None}
        return dataclasses.replace(Endpoint(self.url), **given) if given else Endpoint(self.url)


class StackChoice(Params):
    stack: str = Field(EMBEDDED_STACK, description="stack file: its Python runs vllm bench, its model is the "
                                                   "tokenizer, its CPUs are the server's")


class ClockCheckParams(Params):
    """A calibrated token source measured by each client configuration at each stream count."""

    streams: list[int] = Field(default_factory=lambda: [1, 8, 64], description="stream counts")
    rate: float = Field(50.0, gt=0, le=MAX_TOKEN_RATE, description="tokens per second per stream")
    # tok/s, not bench's --rates (requests/s): a field (and flag) of its own name
    rates_tok_s: list[float] | None = Field(None, validation_alias=AliasChoices("rates_tok_s", "rates"),
                                            description="several source rates in tok/s (overrides --rate)")
    clients: list[str] = Field(default_factory=lambda: ["w1"], description="client configurations: wK (K worker "
                                                                           "processes, deferred parsing) or wK-inline")
    ttft_ms: float = Field(50.0, ge=0, le=MAX_SECONDS * 1000, description="source's delay before the first token (ms)")
    output_tokens: int = Field(64, ge=2, le=MAX_TOKENS, description="output tokens per request")
    requests_per_stream: int = Field(3, ge=1, description="requests per stream per level")
    # The flag is --no-pin: the help says what turning it off leaves.
    pin: bool = Field(True, description="with two or more CPUs, the source runs on the last and the client on the "
                                        "others; off: both left to the scheduler")


class ScrapeCostParams(Params):
    pid: int | None = Field(None, ge=1, description="the server's process id (for its CPU)")
    scrapes: int = Field(50, ge=1, description="scrapes to time")


class BenchDataParams(Params):
    only: list[Part] = Field(default_factory=lambda: ["clock", "open", "vllm", "vllm-open"], description="parts")
    force: bool = Field(False, description="replace the existing runs of these experiments")


def _outcome(run: Any, payload: dict[str, Any], table: Any = None, lines: list[str] | None = None,
             fmt: str = ".4g") -> Outcome:
    """What a command did: its run directory first in the JSON document; its table, run and lines as text."""
    shown = [] if table is None else [table.to_string(index=False, float_format=lambda x: f"{x:{fmt}}")]
    return Outcome({"run": str(run.path), **payload}, [*shown, f"run directory: {run.path}", *(lines or [])])


class _Silent:
    def count(self, *a: Any) -> None: ...
    def phase(self, *a: Any) -> None: ...
    def end(self, *a: Any) -> None: ...


def quiet(fn: Callable[..., Outcome]) -> Callable[..., Outcome]:
    """``progress=None`` (``--json``: stdout holds the JSON document only) silences the library's progress lines
    (core.progress) too."""

    @functools.wraps(fn)
    def wrapped(*args: Any, progress: Callable[[str], None] | None = print, **kw: Any) -> Outcome:
        from offload_lab.core import progress as lines

        with lines.to(_Silent()) if progress is None else contextlib.nullcontext():
            return fn(*args, progress=progress, **kw)

    return wrapped


def _new_run(place: RunPlace, experiment: str, params: dict[str, Any], **extra: Any) -> Any:
    from offload_lab.core import environment, runs

    return runs.new_run(place.data_dir, place.campaign, experiment, params,
                        environment=environment.capture_environment(), **extra)


@quiet
def bench(place: RunPlace, server: Server, sweep: Any, open_loop: Any = None,
          progress: Callable[[str], None] | None = print) -> Outcome:
    """A closed-loop sweep (``sweep``: SweepParams), or with ``open_loop`` (OpenLoopParams) an open-loop schedule
    at each rate with the sweep's workload, stop rule, bar and workers."""
    from offload_lab.core import runs
    from offload_lab.core.inputs import check_dir
    from offload_lab.load import sweep as concurrency

    # Before the server is reached: a bad place is the user's to fix, not the server's refusal.
    check_dir(place.data_dir, "--data-dir", write=True)
    endpoint = server.endpoint()
    if open_loop is not None:
        return _open(place, endpoint, sweep, open_loop, progress)
    run = _new_run(place, "concurrency", sweep.model_dump(mode="json"), server=endpoint.record())
    with runs.finishing(run, stopped=(KeyboardInterrupt, concurrency.SweepStopped)):
        verdict = concurrency.run_sweep(run, endpoint, sweep, progress=progress)
    levels = concurrency.summarize_run(run.path)
    cols = ["streams", "workers", "ok_in_window", "achieved_concurrency", "tok_s_median", "tok_s_p5",
            "tpot_median_ms", "ttft_median_s", "holds_bar", "cache_misses", "client_health"]
    return _outcome(run, {"verdict": verdict, "levels": levels.to_dict(orient="records")}, levels[cols], [
        f"held the bar of {sweep.bar_tok_s:g} tok/s up to {verdict['held_bar_up_to_streams']} stream(s); "
        f"provisioning with a {sweep.margin:.0%} margin: {verdict['provisioning_streams']} stream(s)"], ".3g")


def _open(place: RunPlace, endpoint: Any, sweep: Any, params: Any, progress: Any) -> Outcome:
    from offload_lab.bench import open_loop as open_bench
    from offload_lab.core import runs
    from offload_lab.load import open_loop

    run = _new_run(place, open_bench.EXPERIMENT, {"workload": sweep.workload.model_dump(mode="json"),
                                                  **params.model_dump(mode="json"), "bar_tok_s": sweep.bar_tok_s},
                   server=endpoint.record())
    with runs.finishing(run):
        table = open_bench.run_rates(run, endpoint, sweep.workload, params, sweep.bar_tok_s, sweep.workers,
                                     stop_rule=sweep.stop_rule, progress=progress)
    cols = ["rate_rps", "achieved_rps", "ok", "tok_s_median", "send_late_ms_p99", "ttft_ms_p50_send",
            "ttft_ms_p50_sched", "ttft_ms_p99_send", "ttft_ms_p99_sched", "valid_open_loop"]
    knee = open_loop.knee(table.to_dict(orient="records"), sweep.bar_tok_s)
    return _outcome(run, {"knee_rps": knee, "rates": table.to_dict(orient="records")}, table[cols], [
        f"knee (median tok/s per stream below {sweep.bar_tok_s:g}): {knee if knee is not None else 'not reached'}"],
        ".3g")


@quiet
def clock_check(place: RunPlace, p: ClockCheckParams, progress: Callable[[str], None] | None = print) -> Outcome:
    from offload_lab.bench import clock_check as cc
    from offload_lab.core import runs

    clients = [cc.ClientConfig.parse(c) for c in p.clients]
    rates = p.rates_tok_s or [p.rate]
    run = _new_run(place, cc.EXPERIMENT, {"streams": p.streams, "rates_tok_s": rates, "ttft_ms": p.ttft_ms,
                                          "tokens": p.output_tokens, "requests_per_stream": p.requests_per_stream,
                                          "clients": p.clients})
    with runs.finishing(run):
        summary = cc.run_clock_check(run, p.streams, rates[0], p.ttft_ms, p.output_tokens, p.requests_per_stream,
                                     progress=progress, clients=clients, rates=rates, pin=p.pin)
    cols = ["client", "rate_tok_s", "streams", "tok_s_error", "client_rate_error_median", "token_error_ms_p50",
            "token_error_ms_p99", "first_token_error_ms_p99", "itl_error_ms_p99", "lag_ms_p99", "worker_cpu_max",
            "client_cpu_ms_per_token", "client_runq_ms_per_token", "source_runq_ms_per_token", "verdict",
            "miss_share"]
    lines = ["targets (absolute): " + ", ".join(f"{k} <= {v:g}" for k, v in cc.TARGETS.items())]
    for _, row in summary[summary["verdict"] != "pass"].iterrows():
        share = f" (the {row['miss_share']}'s share is larger)" if row["miss_share"] else ""
        lines.append(f"  {row['client']} at {row['rate_tok_s']:g} tok/s, {row['streams']} stream(s): "
                     f"{row['missed']}{share}")
    return _outcome(run, {"levels": summary.to_dict(orient="records"), "targets": cc.TARGETS}, summary[cols], lines)


@quiet
def compare(place: RunPlace, url: str, stack_file: str, params: Any,
            progress: Callable[[str], None] | None = print) -> Outcome:
    from offload_lab.bench import compare as cmp
    from offload_lab.core import runs
    from offload_lab.load.endpoint import Endpoint
    from offload_lab.server import stack

    st = stack.load_stack(stack_file)
    endpoint = Endpoint(url)
    model = endpoint.first_model()
    run = _new_run(place, cmp.EXPERIMENT, params.model_dump(mode="json", by_alias=True), server=endpoint.record(),
                   stack=st.record())
    with runs.finishing(run):
        out = cmp.compare(run, endpoint, st.python, model, str(st.model_path), params,
                          server_cpus=st.spec.server.cpus, progress=progress)
    return _outcome(run, out, lines=[cmp.table(out)])


def scrape_cost(place: RunPlace, url: str, p: ScrapeCostParams) -> Outcome:
    from offload_lab.bench import scrape_cost as sc
    from offload_lab.core import runs
    from offload_lab.load.endpoint import Endpoint

    endpoint = Endpoint(url)
    run = _new_run(place, sc.EXPERIMENT, p.model_dump(), server=endpoint.record())
    with runs.finishing(run):
        out = sc.measure(endpoint, p.pid, p.scrapes)
        run.write_json("scrape_cost.json", out)
    return _outcome(run, out, lines=[f"/metrics: {out['bytes']} bytes, {out['wall_ms_p50']:.1f} ms a scrape on the "
                                    f"client; server CPU {out['server_cpu_ms_per_scrape']} ms a scrape"])


def bench_data(place: RunPlace, stack_file: str, p: BenchDataParams,
               progress: Callable[[str], None] | None = print) -> Outcome:
    """Regenerate data/bench/ (:func:`offload_lab.bench.data.regenerate`): the run of each part."""
    from offload_lab.bench import data

    done = data.regenerate(place.data_dir, parts=p.only, stack_file=stack_file, force=p.force, progress=progress)
    return Outcome({"runs": {k: str(v) for k, v in done.items()}}, [f"  {k}: {v}" for k, v in done.items()])
