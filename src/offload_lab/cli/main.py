"""``offload-lab``: one command with a subcommand per job. ``offload-lab SUBCOMMAND --help`` explains each."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from offload_lab import __version__
from offload_lab.core.errors import OffloadLabError

Handler = Callable[[argparse.Namespace], int]


from offload_lab.cli.common import print_json as _print_json


# --- model -------------------------------------------------------------------------------------------------------

def cmd_model_tiny(args: argparse.Namespace) -> int:
    from offload_lab.server import tinymodel

    t0 = time.monotonic()
    files = tinymodel.build_tiny_model(Path(args.out), Path(args.config) if args.config else None, seed=args.seed)
    elapsed = time.monotonic() - t0
    if args.json:
        _print_json({"out": str(args.out), "seconds": round(elapsed, 3), "files": files})
    else:
        print(f"built the tiny MoE in {args.out} ({len(files)} files, {elapsed:.1f} s)")
        for name, digest in files.items():
            print(f"  {digest}  {name}")
    return 0


# --- serve -------------------------------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    from offload_lab.server import stack

    st = stack.load_stack(args.stack)
    server = stack.start_server(st, Path(args.data_dir), args.campaign, port=args.port,
                                ready_timeout_s=args.ready_timeout)
    print(f"server ready at {server.url} (model {server.model_name}); log: {server.log_path}", flush=True)
    print("press Ctrl-C to stop it", flush=True)
    stop = {"now": False}

    def handle(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    try:
        while not stop["now"] and server.alive():
            time.sleep(0.5)
    finally:
        died = not server.alive()
        info = server.stop()
    if died:
        print(f"the server exited on its own (return code {info.get('returncode')}); log: {server.log_path}",
              file=sys.stderr)
        return 3
    print(f"server stopped ({info.get('signal')}); boot recorded in {server.run.path}")
    return 0


# --- campaign ----------------------------------------------------------------------------------------------------

def cmd_campaign_run(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner as campaign

    only = [x for x in args.only.split(",") if x] if args.only else None
    result = campaign.run_campaign(args.file, data_root=args.data_dir, url=args.url, port=args.port, only=only)
    print(f"campaign {result.campaign}: {len(result.runs)} experiment(s) in {result.seconds:.0f} s")
    for a in result.boot_attempts:
        expected = "" if a["expected"] is None else f" (expected {a['expected']})"
        print(f"  boot attempt {a['boot']}: {a['outcome']}{expected}: {a['run']}")
    for r in result.runs:
        print(f"  data and output notebook: {r}")
    if result.session:
        print(f"  ledger session {result.session}: `offload-lab campaign ledger {result.campaign}`")
    if args.paper:
        from offload_lab.paper import build as paper

        built = paper.build_paper(campaign=result.campaign, data_root=Path(args.data_dir))
        for label, path in built.outputs().items():
            print(f"  paper {label}: {path}")
    return 0


def cmd_campaign_check(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner as campaign

    c = campaign.load_campaign(args.file)
    campaign.validate(c)
    print(f"campaign file {args.file} is valid: {len(c.spec.experiments)} experiment(s)")
    return 0


# --- runs --------------------------------------------------------------------------------------------------------

def cmd_runs_list(args: argparse.Namespace) -> int:
    from offload_lab.core import runs

    rows = []
    for run_dir in runs.iter_runs(Path(args.data_dir), args.campaign, args.experiment):
        m = runs.load_manifest(run_dir)
        rows.append({"run": str(run_dir), "experiment": m.get("experiment"), "outcome": m.get("outcome"),
                     "started_at": m.get("started_at")})
    if args.json:
        _print_json(rows)
    else:
        for r in rows:
            print(f"{r['outcome']:8} {r['started_at']}  {r['run']}")
        if not rows:
            print(f"no runs under {Path(args.data_dir) / args.campaign}")
    return 0


def cmd_runs_verify(args: argparse.Namespace) -> int:
    from offload_lab.core import runs

    bad = 0
    for d in args.run_dirs:
        problems = runs.verify_run(Path(d))
        if problems:
            bad += 1
            for p in problems:
                print(p, file=sys.stderr)
        else:
            print(f"ok  {d}")
    return 1 if bad else 0


# --- environment -------------------------------------------------------------------------------------------------

def cmd_env(args: argparse.Namespace) -> int:
    from offload_lab.core import environment

    _print_json(environment.capture_environment(include_all_packages=args.all_packages))
    return 0


# --- paper -------------------------------------------------------------------------------------------------------

def cmd_paper_build(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    t0 = time.monotonic()
    result = paper.build_paper(
        campaign=args.campaign, data_root=Path(args.data_dir), out_dir=Path(args.out) if args.out else None,
        repo_root=Path(args.root) if args.root else None,
    )
    print(f"paper for campaign {args.campaign} built in {time.monotonic() - t0:.1f} s: {result.summary()}")
    for label, path in result.outputs().items():
        print(f"  {label}: {path}")
    return 0


def cmd_paper_prepare(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    result = paper.prepare(campaign=args.campaign, data_root=Path(args.data_dir) if args.data_dir else None,
                           out_dir=Path(args.out) if args.out else None,
                           repo_root=Path(args.root) if args.root else None)
    print(f"claims and figures written to {result}")
    return 0


def cmd_paper_audit(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    report = paper.audit(
        claims_json=Path(args.claims) if args.claims else None, pdf=Path(args.pdf) if args.pdf else None,
        html=Path(args.html) if args.html else None, repo_root=Path(args.root) if args.root else None,
    )
    print("audit passed: " + ", ".join(report.checked))
    return 0


# --- quality -----------------------------------------------------------------------------------------------------

def _quality_out(args: argparse.Namespace, result: Any, lines: list[str]) -> None:
    if getattr(args, "json", False):
        _print_json(result)
    else:
        print("\n".join(lines))


def cmd_quality_run(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.run(args)
    lines = [f"side {args.label}: {'valid' if r['valid'] else 'INVALID (kept, not scored)'}; run {r['run']}"]
    lines += [f"  {why}" for why in r["invalid_reasons"]]
    for row in r["summary"] or []:
        lines.append(f"  {row['benchmark']} replicate {row['replicate']}: {row['correct']}/{row['answered']} "
                     f"correct of {row['items']} items")
    _quality_out(args, r, lines)
    return 0 if r["valid"] else 1


def cmd_quality_compare(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.compare(args)
    lines = [f"comparison written to {r['run']} (delta = local minus reference)"]
    for row in r["comparison"]:
        lines.append(f"  {row['benchmark']}: n={row['n']} delta={row['delta']:+.3f} "
                     f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}] b={row['b']} c={row['c']} "
                     f"McNemar p={row['mcnemar_p']:.3g} flips={row['flip_fraction']:.3f}")
    _quality_out(args, r, lines)
    return 0


def cmd_quality_paired(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.paired_counts(args)
    _quality_out(args, r, [
        f"delta {r['delta']:+.4f}, paired bootstrap 95% [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}], "
        f"Newcombe [{r['newcombe_low']:+.4f}, {r['newcombe_high']:+.4f}]",
        f"exact McNemar p {r['mcnemar_p']:.4g} (b={r['b']}, c={r['c']}); flip fraction {r['flip_fraction']:.4f} "
        f"[{r['flip_ci_low']:.4f}, {r['flip_ci_high']:.4f}]; smallest resolvable difference "
        f"{r['resolvable_delta']:.4f}",
    ])
    return 0


def cmd_quality_subset(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.subset(args)
    _quality_out(args, r, [json.dumps(x) for x in r])
    return 0


def cmd_quality_selfcheck(args: argparse.Namespace) -> int:
    from offload_lab.cli import quality as commands

    r = commands.selfcheck(args)
    _quality_out(args, r, [f"HumanEval scorer: {r['canonical_passed']}/{r['problems']} canonical solutions pass, "
                           f"{r['empty_passed']} empty completions pass"])
    return 0


# --- capacity ----------------------------------------------------------------------------------------------------

def cmd_capacity(args: argparse.Namespace) -> int:
    from offload_lab.seats import cost
    from offload_lab.seats.profile import load_profile, profile_timing

    q, q_from = args.q, "--q"
    if args.profile:
        if args.stream_tok_s is None:
            from offload_lab.core.errors import InputError

            raise InputError("--profile needs --stream-tok-s, the per-stream output rate to time its tokens at")
        q = profile_timing(load_profile(args.profile), args.stream_tok_s, args.prefill_tok_s).q
        q_from = f"profile {args.profile}"
    prices = cost.Prices(args.pod_eur_per_hour, args.seat_eur_per_month,
                         args.hours_per_month if args.hours_per_month is not None else cost.HOURS_PER_MONTH)
    r = {"q_from": q_from, **cost.quote(q, args.streams_per_pod, args.alpha, args.team, prices, rho=args.rho)}
    if args.json:
        _print_json(r)
        return 0
    print(f"q = {r['q']:.4g} ({q_from}), {r['model']} model, alpha = {r['alpha']:g}")
    print(f"one pod of {r['streams_per_pod']} streams serves at most {r['seats_per_pod']} developers")
    print(f"a team of {r['team']} needs {r['streams_needed']} streams: {r['pods']} pod(s) with streams pooled "
          f"({r['pods_partitioned']} with each developer pinned to one pod); P(overflow) = "
          f"{r['overflow_probability']:.3g}")
    print(f"a pod costs {r['pod_eur_per_month']:,.2f} EUR a month ({r['hours_per_month']:g} hours); break-even at "
          f"{r['break_even_seats']:.2f} subscriptions (smallest team that saves: {r['break_even_team']})")
    print(f"team: {r['team_eur_per_month_self_hosted']:,.2f} EUR a month self-hosted against "
          f"{r['team_eur_per_month_subscriptions']:,.2f} in subscriptions; saving {100 * r['saving_fraction']:.1f}%")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from offload_lab.seats.profile import load_profile, profile_timing

    prof = load_profile(args.file)
    timing = profile_timing(prof, args.stream_tok_s, args.prefill_tok_s)
    published = prof.published.model_dump() if prof.published else None
    if args.json:
        _print_json({"profile": prof.name, "provenance": prof.provenance.model_dump(), "timing": timing.to_dict(),
                     "published": published})
        return 0
    print(f"profile {prof.name} ({prof.provenance.kind}: {prof.provenance.source}"
          f"{', ' + prof.provenance.section if prof.provenance.section else ''}) is valid")
    print(f"  {timing.hours_generating:.3g} hours generating in {prof.period_days:g} days "
          f"({100 * timing.fraction_of_period:.2f}% of the period); q = {timing.q:.4g} over a window of "
          f"{timing.window_hours_in_period:g} hours")
    if not timing.split_known:
        print("  (the profile gives no split of written tokens into output and new input: all are timed at the "
              "output rate, an upper bound)")
    if published:
        print(f"  published: {published}")
    return 0


# --- load generator ----------------------------------------------------------------------------------------------

def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values:
        from offload_lab.core.errors import InputError

        raise InputError(f"{flag} {text!r} is not a comma-separated list of whole numbers, e.g. 1,2,4")
    return values


def cmd_bench(args: argparse.Namespace) -> int:
    from offload_lab.load import closed_loop
    from offload_lab.experiments.concurrency import runner as concurrency
    from offload_lab.core import environment
    from offload_lab.core import runs
    from offload_lab.load import workloads

    spec = workloads.WorkloadSpec(
        regime=args.regime, output_tokens=args.output_tokens, prompt_tokens=args.prompt_tokens,
        prefix_tokens=args.prefix_tokens, suffix_tokens=args.suffix_tokens,
        initial_context_tokens=args.initial_context_tokens, turn_new_tokens=args.turn_new_tokens,
        think_time_s=args.think_time, block_size=args.block_size,
    )
    params = concurrency.SweepParams(
        workload=spec, streams=_int_list(args.streams, "--streams"), requests_per_stream=args.requests_per_stream,
        bar_tok_s=args.bar, margin=args.margin,
        stop_rule=closed_loop.StopRule(max_error_rate=args.max_error_rate, min_errors=args.min_errors,
                                       max_consecutive_failures=args.max_consecutive_failures),
    )
    run = runs.new_run(args.out, args.campaign, "concurrency", params.model_dump(mode="json"),
                       environment=environment.capture_environment(), server={"url": args.url})
    with runs.finishing(run, stopped=(KeyboardInterrupt, concurrency.SweepStopped)):
        verdict = concurrency.run_sweep(run, args.url, params, progress=None if args.json else print)
    levels = concurrency.summarize_run(run.path)
    if args.json:
        _print_json({"run": str(run.path), "verdict": verdict, "levels": levels.to_dict(orient="records")})
    else:
        cols = ["streams", "ok_in_window", "achieved_concurrency", "tok_s_median", "tok_s_p5", "tpot_median_ms",
                "ttft_median_s", "holds_bar", "cache_misses", "client_lag_flag"]
        print(levels[cols].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        print(f"held the bar of {args.bar:g} tok/s up to {verdict['held_bar_up_to_streams']} stream(s); "
              f"provisioning with a {args.margin:.0%} margin: {verdict['provisioning_streams']} stream(s)")
        print(f"run directory: {run.path}")
    return 0


def cmd_clock_check(args: argparse.Namespace) -> int:
    from offload_lab.bench import clock_check
    from offload_lab.core import environment
    from offload_lab.core import runs

    streams = _int_list(args.streams, "--streams")
    run = runs.new_run(args.out, args.campaign, clock_check.EXPERIMENT,
                       {"streams": streams, "rate_tok_s": args.rate, "ttft_ms": args.ttft_ms, "tokens": args.tokens,
                        "requests_per_stream": args.requests_per_stream},
                       environment=environment.capture_environment())
    with runs.finishing(run):
        summary = clock_check.run_clock_check(run, streams, args.rate, args.ttft_ms, args.tokens,
                                              args.requests_per_stream, progress=None if args.json else print)
    if args.json:
        _print_json({"run": str(run.path), "levels": summary.to_dict(orient="records")})
    else:
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print(f"run directory: {run.path}")
    return 0


def cmd_compare_vllm(args: argparse.Namespace) -> int:
    from offload_lab.core import environment
    from offload_lab.load import client as load
    from offload_lab.core import runs
    from offload_lab.server import stack
    from offload_lab.bench import vllm_bench

    st = stack.load_stack(args.stack)
    model = load.first_model(args.url)
    run = runs.new_run(args.out, args.campaign, vllm_bench.EXPERIMENT,
                       {"input_len": args.input_len, "output_len": args.output_len, "num_prompts": args.num_prompts,
                        "concurrency": args.concurrency, "rounds": args.rounds},
                       environment=environment.capture_environment(), server={"url": args.url}, stack=st.record())
    with runs.finishing(run):
        out = vllm_bench.compare(run, args.url, st.python, model, str(st.model_path), args.input_len,
                                 args.output_len, args.num_prompts, args.concurrency, args.rounds)
    if args.json:
        _print_json({"run": str(run.path), **out})
    else:
        print(f"median TTFT ours/vLLM: {out['ttft_ratio']:.3f}   median TPOT ours/vLLM: {out['tpot_ratio']:.3f}")
        print(f"run directory: {run.path}")
    return 0


# --- parser ------------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="offload-lab",
        description="Measure what it costs to serve a mixture-of-experts model with experts offloaded to host RAM: "
                    "start the server from a stack file, run the campaign's notebooks, and build the paper "
                    "whose every number traces to a data file.",
    )
    p.add_argument("--version", action="version", version=f"offload-lab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="SUBCOMMAND")

    # model
    pm = sub.add_parser("model", help="build models (the embedded tiny MoE)",
                        description="Build models that the project serves without downloading weights.")
    msub = pm.add_subparsers(dest="model_command", metavar="KIND")
    pt = msub.add_parser("tiny", help="build the embedded tiny random-weight MoE",
                         description="Build the embedded default model: a tiny random-weight Qwen-MoE with a "
                                     "locally trained byte-level BPE tokenizer. Deterministic: the same seed gives "
                                     "the same sha256 for every file.")
    pt.add_argument("--out", required=True, help="directory to write the model into (created if missing)")
    pt.add_argument("--config", help="model config YAML (default: configs/models/tiny-qwen3-moe.yaml)")
    pt.add_argument("--seed", type=int, default=None, help="weight seed (default: the config's seed)")
    pt.add_argument("--json", action="store_true", help="print the files and their sha256 as JSON")
    pt.set_defaults(func=cmd_model_tiny)

    # serve
    ps = sub.add_parser("serve", help="start a vLLM server from a stack file and keep it until Ctrl-C",
                        description="Start the server a stack file describes, bound to 127.0.0.1, wait until "
                                    "/health and /v1/models answer, and keep it running until Ctrl-C or SIGTERM. "
                                    "Each start is a run of the 'boots' experiment: the server log and the "
                                    "classified outcome (ready, oom_load, oom_kv_cache, init_failure, exited, "
                                    "timeout, died_first_request, probe_failed: a probe request is sent once "
                                    "ready) are kept.")
    ps.add_argument("--stack", required=True, help="stack file, e.g. configs/stacks/embedded.yaml")
    ps.add_argument("--port", type=int, default=None, help="port to bind (default: a free one); an error if taken")
    ps.add_argument("--campaign", default="scratch", help="campaign the boot run is filed under (default: scratch)")
    ps.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    ps.add_argument("--ready-timeout", type=float, default=None,
                    help="seconds to wait for readiness (default: the stack file's ready_timeout_s)")
    ps.set_defaults(func=cmd_serve)

    # campaign
    pc = sub.add_parser("campaign", help="run or check a campaign of experiments",
                        description="Campaigns list notebooks and their parameters (configs/campaigns/*.yaml).")
    csub = pc.add_subparsers(dest="campaign_command", metavar="ACTION")
    pcr = csub.add_parser("run", help="start the stack's server, execute every notebook, stop the server",
                          description="Execute each experiment's notebook through papermill into a new run "
                                      "directory data/<campaign>/<experiment>/<run-id>/ with its manifest. A "
                                      "parameter the notebook does not declare is an error; a failing cell stops "
                                      "the campaign, keeps the run marked failed, and exits non-zero.")
    pcr.add_argument("file", help="campaign file, e.g. configs/campaigns/embedded.yaml")
    pcr.add_argument("--url", default=None, help="use this running server instead of starting the campaign's stack")
    pcr.add_argument("--port", type=int, default=None, help="port for the server the campaign starts")
    pcr.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    pcr.add_argument("--only", default=None,
                     help="comma-separated experiment names to run, 'boots' for the boot attempts (default: all)")
    pcr.add_argument("--paper", action="store_true",
                     help="when the campaign succeeds, build the paper from its data (as `paper build --campaign`)")
    pcr.set_defaults(func=cmd_campaign_run)
    pcc = csub.add_parser("check", help="validate a campaign file and its notebooks' parameters without running",
                          description="Check that every notebook exists and declares every parameter passed.")
    pcc.add_argument("file", help="campaign file")
    pcc.set_defaults(func=cmd_campaign_check)

    # runs
    pr = sub.add_parser("runs", help="list and verify run directories",
                        description="Inspect the data tree: list runs, verify files against manifests.")
    rsub = pr.add_subparsers(dest="runs_command", metavar="ACTION")
    prl = rsub.add_parser("list", help="list the runs of a campaign", description="List runs with outcome and start.")
    prl.add_argument("--campaign", required=True, help="campaign name (a directory under the data root)")
    prl.add_argument("--experiment", default=None, help="only this experiment")
    prl.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    prl.add_argument("--json", action="store_true", help="print JSON")
    prl.set_defaults(func=cmd_runs_list)
    prv = rsub.add_parser("verify", help="check every file of runs against their manifests' sha256",
                          description="Exit non-zero, naming the file, when a file is missing, changed or added.")
    prv.add_argument("run_dirs", nargs="+", help="run directories")
    prv.set_defaults(func=cmd_runs_verify)

    # env
    pe = sub.add_parser("env", help="print what this machine is (Python, packages, CPU, memory, GPUs, topology)",
                        description="Print the environment record that every manifest carries, as JSON.")
    pe.add_argument("--all-packages", action="store_true", help="list every installed package, not only key ones")
    pe.set_defaults(func=cmd_env)

    # paper
    pp = sub.add_parser("paper", help="build the paper from a campaign's data",
                        description="Resolve every claim from data files, draw figures, render PDF and HTML, and "
                                    "audit the result for numbers no claim produced.")
    psub = pp.add_subparsers(dest="paper_command", metavar="ACTION")
    fails = ("Exits non-zero naming the claim and file when a data file is missing or changed, or a claim cannot "
             "be computed; and naming the number and its place when the audit finds a number no claim produced.")
    q = psub.add_parser("build", help="resolve claims, draw figures, render PDF and HTML, audit",
                        description="Resolve every claim from the campaign's data, draw the figures, render PDF and "
                                    "HTML (quarto render where Quarto is installed, else pandoc and Typst), and "
                                    "audit the result. " + fails)
    q.add_argument("--campaign", default="embedded", help="campaign whose data the paper reads (default: embedded)")
    q.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    q.add_argument("--out", default=None, help="output directory (default: _output/<campaign>)")
    q.add_argument("--root", default=None, help="repository root holding paper/ and _quarto.yml (default: found)")
    q.set_defaults(func=cmd_paper_build)
    q = psub.add_parser("prepare", help="resolve claims and draw figures only (Quarto's pre-render hook)",
                        description="Write claims.json, the provenance table and the figures that the paper "
                                    "includes; Quarto runs this before rendering. " + fails)
    q.add_argument("--campaign", default=None,
                   help="campaign (default: $OFFLOAD_LAB_CAMPAIGN, else the one paper.qmd names)")
    q.add_argument("--data-dir", default=None, help="root of the data tree (default: $OFFLOAD_LAB_DATA_ROOT, else data)")
    q.add_argument("--out", default=None, help="output directory (default: paper/_generated)")
    q.add_argument("--root", default=None, help="repository root holding paper/ and _quarto.yml (default: found)")
    q.set_defaults(func=cmd_paper_prepare)
    q = psub.add_parser("audit", help="audit a rendered paper for numbers no claim produced (Quarto's post-render hook)",
                        description="Lint paper/*.qmd for numerals typed into prose, then read the rendered PDF and "
                                    "HTML and fail on any number no claim printed, or a leftover shortcode marker.")
    q.add_argument("--claims", default=None, help="claims.json (default: the one prepare wrote)")
    q.add_argument("--pdf", default=None, help="rendered PDF (default: Quarto's _manuscript/*.pdf)")
    q.add_argument("--html", default=None, help="rendered HTML (default: Quarto's _manuscript/index.html)")
    q.add_argument("--root", default=None, help="repository root (default: found)")
    q.set_defaults(func=cmd_paper_audit)

    # quality
    pq = sub.add_parser("quality", help="paired answer-quality comparison (GSM8K, IFEval, HumanEval)",
                        description="Compare answer quality of two OpenAI-compatible endpoints (the local stack "
                                    "and a reference API) on fixed subsets of GSM8K, IFEval and HumanEval, item by "
                                    "item, with paired statistics. API keys come only from environment variables.")
    qsub = pq.add_subparsers(dest="quality_command", metavar="ACTION")
    qr = qsub.add_parser("run", help="answer the fixed subsets with one endpoint and score them",
                         description="Run the canaries (continuation, thinking off, finish reason), then every item "
                                     "of the chosen benchmarks, into a new run of experiment quality-side. Every "
                                     "request, response and status is kept per item. A side whose canaries fail is "
                                     "marked invalid and kept, never scored; the exit status is then 1.")
    qr.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000 or https://api.deepseek.com")
    qr.add_argument("--kind", choices=("vllm", "deepseek", "openai"), default="vllm",
                    help="backend adapter: vllm (continue_final_message, chat_template_kwargs), deepseek (beta "
                         "prefix completion, thinking disabled), openai (plain chat: cannot continue; default vllm)")
    qr.add_argument("--benchmark", default="all", help="gsm8k, ifeval, humaneval, comma-separated, or all (default)")
    qr.add_argument("--label", default="local", help="name of this side in data files (default: local)")
    qr.add_argument("--model", default=None, help="model name to send (default: the server's first model)")
    qr.add_argument("--api-key-env", default=None,
                    help="environment variable holding the API key (default for --kind deepseek: "
                         "OFFLOAD_LAB_REFERENCE_API_KEY); the key itself is never a flag")
    qr.add_argument("--limit", type=int, default=None, help="only the first N items of each fixed subset")
    qr.add_argument("--replicates", type=int, default=2,
                    help="times each item is answered (default 2: the second gives the noise floor)")
    qr.add_argument("--max-tokens", default=None,
                    help="N for every benchmark, or gsm8k=N,ifeval=N,humaneval=N (default 1024, 1280, 1024)")
    qr.add_argument("--seed", type=int, default=None, help="sampling seed sent with each request (default 0)")
    qr.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    qr.add_argument("--retries", type=int, default=3,
                    help="retries of connection errors, timeouts and 408/429/5xx answers (default 3)")
    qr.add_argument("--timeout", type=float, default=600.0, help="seconds one request may take (default 600)")
    qr.add_argument("--exec-timeout", type=float, default=10.0,
                    help="seconds a HumanEval program may run (default 10; a timeout is retried once with twice)")
    qr.add_argument("--on-canary-failure", choices=("stop", "continue"), default="stop",
                    help="stop: skip the items of an invalid side (default); continue: send them and keep the "
                         "answers, unscored, for diagnosis")
    qr.add_argument("--datasets", default=None,
                    help="dataset directory with gsm8k/test.jsonl and ifeval/input_data.jsonl "
                         "(default: $OFFLOAD_LAB_DATASETS); sha256-checked")
    qr.add_argument("--download", action="store_true",
                    help="download missing GSM8K/IFEval files from their source repositories at the pinned commits")
    qr.add_argument("--campaign", default="scratch", help="campaign the run is filed under (default: scratch)")
    qr.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    qr.add_argument("--json", action="store_true", help="print the result as JSON")
    qr.set_defaults(func=cmd_quality_run)
    qc = qsub.add_parser("compare", help="compare two scored sides item by item",
                         description="Copy two sides (from `quality run`) into a new run of experiment quality and "
                                     "compare them per benchmark: difference (local minus reference) with a paired "
                                     "bootstrap 95% interval and Newcombe's interval, exact McNemar p, b and c, flip "
                                     "fraction with a Wilson interval, the smallest resolvable difference, and each "
                                     "side's noise floor (replicate 0 against 1). Invalid sides are refused.")
    qc.add_argument("--reference", required=True, help="the reference side: a quality-side run directory or its "
                                                       "sides/<label> directory")
    qc.add_argument("--local", required=True, help="the local side, likewise")
    qc.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    qc.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    qc.add_argument("--campaign", default="scratch", help="campaign the run is filed under (default: scratch)")
    qc.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
    qc.add_argument("--json", action="store_true", help="print the result as JSON")
    qc.set_defaults(func=cmd_quality_compare)
    qp = qsub.add_parser("paired", help="paired statistics from counts, for planning and checking",
                         description="From n items, b (only the reference right) and c (only local right): the "
                                     "difference (c-b)/n with its paired bootstrap 95% interval (ci_low, ci_high) "
                                     "and Newcombe's, exact McNemar p, the flip fraction (b+c)/n with its Wilson "
                                     "interval, and the smallest resolvable difference.")
    qp.add_argument("--n", type=int, required=True, help="paired items")
    qp.add_argument("--b", type=int, required=True, help="items only the reference got right")
    qp.add_argument("--c", type=int, required=True, help="items only the local side got right")
    qp.add_argument("--a", type=int, default=None,
                    help="items both got right (only Newcombe's interval uses it; default: every agreeing item)")
    qp.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    qp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    qp.add_argument("--json", action="store_true",
                    help="print JSON (keys include delta, ci_low, ci_high, mcnemar_p, flip_fraction)")
    qp.set_defaults(func=cmd_quality_paired)
    qs = qsub.add_parser("subset", help="check (or, once, write) the fixed item subsets",
                         description="Check that each stored subset is what its recorded seed draws from the pinned "
                                     "data file; --write draws and stores a subset (done once, then committed).")
    qs.add_argument("--benchmark", default="all", help="gsm8k, ifeval, humaneval, comma-separated, or all (default)")
    qs.add_argument("--write", action="store_true", help="draw and store the subset instead of checking it")
    qs.add_argument("--n", type=int, default=None, help="with --write: subset size (default 150, 150, 164)")
    qs.add_argument("--seed", type=int, default=20261129, help="with --write: the seed to record (default 20261129)")
    qs.add_argument("--datasets", default=None, help="dataset directory (default: $OFFLOAD_LAB_DATASETS)")
    qs.add_argument("--download", action="store_true", help="download missing data files at the pinned commits")
    qs.add_argument("--json", action="store_true", help="print JSON")
    qs.set_defaults(func=cmd_quality_subset)
    qk = qsub.add_parser("selfcheck", help="check the HumanEval scorer: canonical solutions pass, empty ones fail",
                         description="Run the 164 canonical solutions (all must pass) and 164 empty completions "
                                     "(none may pass) in subprocesses, in parallel; exit 2 when either fails.")
    qk.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per program (default 10)")
    qk.add_argument("--json", action="store_true", help="print JSON")
    qk.set_defaults(func=cmd_quality_selfcheck)

    # capacity
    pcap = sub.add_parser(
        "capacity", help="seats, pods and monthly cost for a team under the seat rule",
        description="How many developers one pod serves and what a team costs. A pod serves --streams-per-pod "
                    "streams at the bar; a developer is generating at a moment of the working window with chance q; "
                    "the seat rule accepts a chance of at most --alpha that more developers generate at once than "
                    "the pods have streams (Binomial(n, q), or beta-binomial with --rho > 0). Pods pool their streams "
                    "for the team. Prints seats_per_pod, pods, pod_eur_per_month, break_even_seats, "
                    "team_eur_per_month_self_hosted, team_eur_per_month_subscriptions, saving_fraction and more.")
    qsrc = pcap.add_mutually_exclusive_group(required=True)
    qsrc.add_argument("--q", type=float, help="chance a developer is generating at a moment of the window, e.g. 0.071")
    qsrc.add_argument("--profile", help="usage profile YAML to compute q from (needs --stream-tok-s)")
    pcap.add_argument("--stream-tok-s", type=float, default=None,
                      help="with --profile: output tokens/s per stream to time the profile's tokens at (the bar)")
    pcap.add_argument("--prefill-tok-s", type=float, default=None,
                      help="with --profile: prefill tokens/s for its new input tokens (needed when it has some)")
    pcap.add_argument("--streams-per-pod", type=int, required=True, help="streams one pod serves at the bar")
    pcap.add_argument("--alpha", type=float, required=True,
                      help="accepted chance that more developers generate at once than there are streams, e.g. 0.01")
    pcap.add_argument("--team", type=int, required=True, help="developers in the team to size and cost")
    pcap.add_argument("--pod-eur-per-hour", type=float, required=True, help="pod price, EUR an hour")
    pcap.add_argument("--seat-eur-per-month", type=float, required=True, help="subscription, EUR a seat a month")
    pcap.add_argument("--hours-per-month", type=float, default=None,
                      help="hours a pod is billed a month (default 730 = 24 x 365 / 12, run day and night)")
    pcap.add_argument("--rho", type=float, default=0.0,
                      help="intra-team correlation for the beta-binomial model (default 0: developers independent)")
    pcap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    pcap.set_defaults(func=cmd_capacity)

    # profile
    ppro = sub.add_parser(
        "profile", help="check a usage profile and time it: hours generating, share of the period, q",
        description="Validate a usage profile (configs/profiles/*.yaml) and compute, at the given per-stream and "
                    "prefill rates, the hours the developer's agent spends generating, their share of the period, and "
                    "q, the chance of generating at a moment of the working window. A bad profile (negative tokens, a "
                    "window longer than a day, ...) exits 2 naming the field.")
    ppro.add_argument("file", help="usage profile YAML, e.g. configs/profiles/published-week.yaml")
    ppro.add_argument("--stream-tok-s", type=float, required=True, help="output tokens/s per stream, e.g. 40")
    ppro.add_argument("--prefill-tok-s", type=float, default=None,
                      help="prefill tokens/s for new input tokens (needed when the profile has some)")
    ppro.add_argument("--json", action="store_true", help="print JSON")
    ppro.set_defaults(func=cmd_profile)

    # audit, plan make|check|show, memory-math, checkpoint synth, routing collect ("will it fit"; handlers and
    # help texts in fit_cli.py, so this shared module only gains these lines)
    from offload_lab.cli import fit as fit_cli

    fit_cli.add_parsers(sub)
    # stack install|check, boots list, campaign ledger (handlers and help texts in pod_cli.py)
    from offload_lab.cli import pod as pod_cli

    pod_cli.add_parsers(sub, csub)
    # bench
    pb = sub.add_parser(
        "bench", help="sweep closed-loop streams of one regime against a server; per-stream tok/s against the bar",
        description="Run N closed-loop streams of a regime for each N in --streams (prompts built to exact token "
                    "counts with the server's /tokenize, caches primed before the clock starts), and report per "
                    "level the median and p5 output tokens/s per stream over the window where all N are in flight, "
                    "TPOT, TTFT, achieved concurrency, cache hits, /metrics, and how many streams held the bar. "
                    "Writes a run directory under --out/<campaign>/concurrency/.")
    pb.add_argument("--url", required=True, help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    pb.add_argument("--regime", required=True, choices=["short", "cold_prefill", "shared_prefix", "private_context",
                                                        "agent_turns"], help="workload regime")
    pb.add_argument("--streams", default="1,2,4", help="comma-separated stream counts (default: 1,2,4)")
    pb.add_argument("--requests-per-stream", type=int, default=4, help="requests (turns) per stream per level")
    pb.add_argument("--output-tokens", type=int, default=64, help="tokens per reply, ignore_eos (default: 64)")
    pb.add_argument("--prompt-tokens", type=int, default=128, help="short/cold_prefill: prompt length")
    pb.add_argument("--prefix-tokens", type=int, default=2048, help="shared_prefix/private_context: context length")
    pb.add_argument("--suffix-tokens", type=int, default=32, help="new tokens after the cached context")
    pb.add_argument("--initial-context-tokens", type=int, default=2048, help="agent_turns: context at turn one")
    pb.add_argument("--turn-new-tokens", type=int, default=256, help="agent_turns: new tokens per turn")
    pb.add_argument("--think-time", type=float, default=0.0, help="agent_turns: seconds between reply and next turn")
    pb.add_argument("--block-size", type=int, default=None, help="KV block size (default: read from /metrics)")
    pb.add_argument("--bar", type=float, default=40.0, help="bar, median output tok/s per stream (default: 40)")
    pb.add_argument("--margin", type=float, default=0.10, help="provisioning margin over the bar (default: 0.10)")
    pb.add_argument("--max-error-rate", type=float, default=0.05, help="stop rule: error rate (default: 0.05) ...")
    pb.add_argument("--min-errors", type=int, default=2, help="... with at least this many errors (default: 2)")
    pb.add_argument("--max-consecutive-failures", type=int, default=5, help="stop rule: failures in a row")
    pb.add_argument("--out", default="data", help="data root the run directory is made under (default: data)")
    pb.add_argument("--campaign", default="bench", help="campaign name for the run (default: bench)")
    pb.add_argument("--json", action="store_true", help="print the verdict and levels as JSON")
    pb.set_defaults(func=cmd_bench)

    pk = sub.add_parser(
        "clock-check", help="measure a calibrated token source to prove the load generator's clock",
        description="Start a local token source that streams at a set rate per stream, measure it with the load "
                    "generator at each stream count, and report the rate and TPOT errors and the per-token timing "
                    "error (arrival minus the source's send stamp, same monotonic clock).")
    pk.add_argument("--streams", default="1,8,64", help="comma-separated stream counts (default: 1,8,64)")
    pk.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream (default: 50)")
    pk.add_argument("--ttft-ms", type=float, default=50.0, help="source's delay before the first token (ms)")
    pk.add_argument("--tokens", type=int, default=64, help="tokens per request (default: 64)")
    pk.add_argument("--requests-per-stream", type=int, default=3, help="requests per stream per level")
    pk.add_argument("--out", default="data", help="data root (default: data)")
    pk.add_argument("--campaign", default="bench", help="campaign name for the run (default: bench)")
    pk.add_argument("--json", action="store_true", help="print JSON")
    pk.set_defaults(func=cmd_clock_check)

    pv = sub.add_parser(
        "compare-vllm", help="run vLLM's own `vllm bench serve` and this load generator side by side",
        description="Alternate rounds of `vllm bench serve` (run in the stack's server environment) and this "
                    "load generator on the same server and workload; report the ratio of their median TTFT and TPOT.")
    pv.add_argument("--url", required=True, help="base URL of the running vLLM server")
    pv.add_argument("--stack", default="configs/stacks/embedded.yaml",
                    help="stack file: its Python runs vllm bench and its model is the tokenizer")
    pv.add_argument("--input-len", type=int, default=128, help="prompt tokens (default: 128)")
    pv.add_argument("--output-len", type=int, default=64, help="output tokens (default: 64)")
    pv.add_argument("--num-prompts", type=int, default=16, help="requests per round and tool (default: 16)")
    pv.add_argument("--concurrency", type=int, default=1, help="closed-loop concurrency (default: 1)")
    pv.add_argument("--rounds", type=int, default=2, help="alternating rounds (default: 2)")
    pv.add_argument("--out", default="data", help="data root (default: data)")
    pv.add_argument("--campaign", default="bench", help="campaign name for the run (default: bench)")
    pv.add_argument("--json", action="store_true", help="print JSON")
    pv.set_defaults(func=cmd_compare_vllm)

    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        # A group given without its action: show that group's help rather than a traceback.
        chosen = [a for a in parser._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
                  if a.prog.endswith(" " + str(args.command))] if args.command else []
        (chosen[0] if chosen else parser).print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except OffloadLabError as e:
        print(f"offload-lab: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("offload-lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
