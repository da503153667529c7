"""``offload-lab bench-data``: regenerate ``data/bench/`` with the settings that ``docs/load-generator.md`` quotes.

Parts (each a run under ``DATA_DIR/bench/<experiment>/``):

- ``clock``: the clock check at 1, 8, 64 and 256 streams, source rates 50 and 200 tok/s, clients ``w1-inline`` (the
  client before issue 15), ``w1`` and ``w2``; the newest such run calibrates the client-health verdict;
- ``open``: open-loop Poisson sweeps past the knee of a capacity-limited token source (800 tok/s shared), uncapped
  and with a client cap of 8 in flight (where the coordinated-omission gap shows);
- ``vllm``: on the embedded vLLM server (started here; the caller holds ``/tmp/offload-vllm.lock``): ``compare`` of
  this load generator, ``vllm bench serve``, AIPerf and GuideLLM (``make peers-env``) at 1 and 4 streams, and the
  /metrics scrape cost;
- ``vllm-open``: an open-loop Poisson sweep on the embedded server past its knee (experiment ``open_loop_vllm``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from offload_lab.bench import clock_check, compare, scrape_cost
from offload_lab.bench.compare_spec import MIN_ROUNDS, CompareParams
from offload_lab.bench import open_loop as open_bench
from offload_lab.core import environment, paths, procs, runs
from offload_lab.core.errors import InputError
from offload_lab.load import open_loop, workloads
from offload_lab.load.bar import BAR_TOK_S
from offload_lab.load.endpoint import Endpoint

CAMPAIGN = "bench"
PARTS = {"clock": [clock_check.EXPERIMENT], "open": [open_bench.EXPERIMENT],
         "vllm": [compare.EXPERIMENT, scrape_cost.EXPERIMENT], "vllm-open": ["open_loop_vllm"]}
CLOCK_STREAMS = [1, 8, 64, 256]
CLOCK_RATES = [50.0, 200.0]
CLOCK_CLIENTS = ["w1-inline", "w1", "w2"]
OPEN_RATES = [4.0, 8.0, 12.0, 16.0, 20.0]
OPEN_CAPACITY = 800.0
COMPARE_STREAMS = [1, 4]
VLLM_OPEN_RATES = [4.0, 8.0, 16.0, 32.0]


def _clear(root: Path, parts: list[str], force: bool) -> None:
    """Refuse to mix fresh runs with old ones unless --force, which removes the old ones first."""
    existing = [d for part in parts for exp in PARTS[part] for d in runs.iter_runs(root, CAMPAIGN, exp)]
    if existing and not force:
        raise InputError(f"{len(existing)} run(s) of these benchmarks already exist under {root / CAMPAIGN} (e.g. "
                         f"{existing[0]}); pass --force to replace them (git keeps the committed ones)")
    for d in existing:
        shutil.rmtree(d)


def _run(root: Path, experiment: str, params: dict[str, Any], **extra: Any) -> runs.Run:
    return runs.new_run(root, CAMPAIGN, experiment, params, environment=environment.capture_environment(), **extra)


def clock(root: Path, progress: Any) -> Path:
    clients = [clock_check.ClientConfig.parse(c) for c in CLOCK_CLIENTS]
    run = _run(root, clock_check.EXPERIMENT, {"streams": CLOCK_STREAMS, "rates_tok_s": CLOCK_RATES, "ttft_ms": 50.0,
                                              "tokens": 64, "requests_per_stream": 3, "clients": CLOCK_CLIENTS})
    with runs.finishing(run):
        clock_check.run_clock_check(run, CLOCK_STREAMS, CLOCK_RATES[0], 50.0, 64, 3, progress=progress,
                                    clients=clients, rates=CLOCK_RATES)
    return run.path


def open_sweeps(root: Path, progress: Any) -> dict[str, Path]:
    """Uncapped and capped sweeps against the capacity-limited source."""
    proc, url = clock_check.start_source(50.0, 50.0, extra_args=["--capacity", str(OPEN_CAPACITY)])
    out = {}
    spec = workloads.WorkloadSpec(regime="short", prompt_tokens=16, output_tokens=64, block_size=16)
    try:
        for cap, rates in ((None, OPEN_RATES), (8, [8.0, 16.0])):
            params = open_loop.OpenLoopParams(rates_rps=rates, requests=60, seed=7, max_concurrency=cap)
            run = _run(root, open_bench.EXPERIMENT, {"source_capacity_tok_s": OPEN_CAPACITY, "workload":
                                                     spec.model_dump(mode="json"), **params.model_dump(mode="json")})
            with runs.finishing(run):
                open_bench.run_rates(run, url, spec, params, BAR_TOK_S, n_workers=2, model="token-source",
                                     progress=progress)
            out[f"open_loop cap={cap}"] = run.path
    finally:
        procs.terminate_group(proc, 5)
    return out


def vllm(root: Path, stack_file: str, progress: Any) -> dict[str, Path]:
    from offload_lab.server import stack

    st = stack.load_stack(paths.resolve_in_root(stack_file))
    server = stack.start_server(st, root, CAMPAIGN)
    out = {}
    try:
        endpoint = Endpoint(server.url)
        model = endpoint.first_model()
        pid = server.process.pid if server.process is not None else None
        run = _run(root, scrape_cost.EXPERIMENT, {"scrapes": 50}, server=endpoint.record())
        with runs.finishing(run):
            run.write_json("scrape_cost.json", scrape_cost.measure(endpoint, pid, 50))
        out["scrape_cost"] = run.path
        for c in COMPARE_STREAMS:
            # at least four requests a stream and window, every tool, the prompt defaults of `compare`
            params = CompareParams(num_prompts=max(16, 4 * c), concurrency=c, rounds=MIN_ROUNDS)
            run = _run(root, compare.EXPERIMENT, params.model_dump(mode="json"), server=endpoint.record(),
                       stack=st.record())
            with runs.finishing(run):
                compare.compare(run, endpoint, st.python, model, str(st.model_path), params,
                                server_cpus=st.spec.server.cpus, progress=progress)
            out[f"compare c={c}"] = run.path
    finally:
        server.stop("bench-data done")
    return out


def vllm_open(root: Path, stack_file: str, progress: Any) -> dict[str, Path]:
    """An open-loop sweep on the embedded server, past its knee, as experiment ``open_loop_vllm``."""
    from offload_lab.server import stack

    st = stack.load_stack(paths.resolve_in_root(stack_file))
    server = stack.start_server(st, root, CAMPAIGN)
    try:
        endpoint = Endpoint(server.url)
        spec = workloads.WorkloadSpec(regime="short", prompt_tokens=128, output_tokens=64)
        params = open_loop.OpenLoopParams(rates_rps=VLLM_OPEN_RATES, requests=60, seed=11)
        run = _run(root, "open_loop_vllm", {"workload": spec.model_dump(mode="json"), **params.model_dump(mode="json")},
                   server=endpoint.record(), stack=st.record())
        with runs.finishing(run):
            open_bench.run_rates(run, endpoint, spec, params, BAR_TOK_S, n_workers=1, progress=progress)
    finally:
        server.stop("bench-data done")
    return {"open_loop_vllm": run.path}


def regenerate(out: str | Path, parts: list[str], stack_file: str, force: bool = False,
               progress: Any = print) -> dict[str, Path]:
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise InputError(f"--only {','.join(parts)!r}: unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    root = paths.data_root(out)
    _clear(root, parts, force)
    done: dict[str, Path] = {}
    if "clock" in parts:
        done["clock_check"] = clock(root, progress)
    if "open" in parts:
        done.update(open_sweeps(root, progress))
    if "vllm" in parts:
        done.update(vllm(root, stack_file, progress))
    if "vllm-open" in parts:
        done.update(vllm_open(root, stack_file, progress))
    return done
