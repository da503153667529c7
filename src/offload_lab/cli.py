"""``offload-lab``: one command with a subcommand per job. ``offload-lab SUBCOMMAND --help`` explains each."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .errors import OffloadLabError

Handler = Callable[[argparse.Namespace], int]


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# --- model -------------------------------------------------------------------------------------------------------

def cmd_model_tiny(args: argparse.Namespace) -> int:
    from . import tinymodel

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
    from . import stack

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
    from . import campaign

    only = [x for x in args.only.split(",") if x] if args.only else None
    result = campaign.run_campaign(args.file, data_root=args.data_dir, url=args.url, port=args.port, only=only)
    print(f"campaign {result.campaign}: {len(result.runs)} experiment(s) in {result.seconds:.0f} s")
    for r in result.runs:
        print(f"  data and output notebook: {r}")
    return 0


def cmd_campaign_check(args: argparse.Namespace) -> int:
    from . import campaign

    c = campaign.load_campaign(args.file)
    campaign.validate(c)
    print(f"campaign file {args.file} is valid: {len(c.spec.experiments)} experiment(s)")
    return 0


# --- runs --------------------------------------------------------------------------------------------------------

def cmd_runs_list(args: argparse.Namespace) -> int:
    from . import runs

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
    from . import runs

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
    from . import environment

    _print_json(environment.capture_environment(include_all_packages=args.all_packages))
    return 0


# --- paper -------------------------------------------------------------------------------------------------------

def cmd_paper_build(args: argparse.Namespace) -> int:
    from . import paper

    t0 = time.monotonic()
    result = paper.build_paper(
        campaign=args.campaign, data_root=Path(args.data_dir), out_dir=Path(args.out) if args.out else None,
        repo_root=Path(args.root) if args.root else None,
    )
    print(f"paper for campaign {args.campaign} built in {time.monotonic() - t0:.1f} s")
    for label, path in result.outputs().items():
        print(f"  {label}: {path}")
    return 0


def cmd_paper_prepare(args: argparse.Namespace) -> int:
    from . import paper

    result = paper.prepare(campaign=args.campaign, data_root=Path(args.data_dir),
                           out_dir=Path(args.out) if args.out else None,
                           repo_root=Path(args.root) if args.root else None)
    print(f"claims and figures for campaign {args.campaign} written to {result}")
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
                                    "classified outcome (ready, oom_load, oom_kv_cache, exited, timeout) are kept.")
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
    pcr.add_argument("--only", default=None, help="comma-separated experiment names to run (default: all)")
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
    for name, func, helptext in (
        ("build", cmd_paper_build, "resolve claims, draw figures, render PDF and HTML, audit"),
        ("prepare", cmd_paper_prepare, "resolve claims and draw figures only (Quarto's pre-render hook)"),
    ):
        q = psub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ". Exits "
                            "non-zero naming the claim and file when a data file is missing or changed, or a "
                            "claim cannot be computed; and naming the number when the audit finds an untraced one.")
        q.add_argument("--campaign", default="embedded", help="campaign whose data the paper reads (default: embedded)")
        q.add_argument("--data-dir", default="data", help="root of the data tree (default: data)")
        q.add_argument("--out", default=None, help="output directory (default: _output/<campaign>)")
        q.add_argument("--root", default=None, help="repository root holding paper/ and _quarto.yml (default: found)")
        q.set_defaults(func=func)
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
