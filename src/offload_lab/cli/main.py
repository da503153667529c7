"""``offload-lab``: one command with a subcommand per job. ``offload-lab SUBCOMMAND --help`` explains each."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from offload_lab import __version__
from offload_lab.core.errors import INTERNAL, InputError, OffloadLabError
from offload_lab.core.redact import redact_text

Handler = Callable[[argparse.Namespace], int]


from offload_lab.cli.common import action_group, http_url, nonneg_int, port_number, seconds
from offload_lab.cli.common import finish_parser
from offload_lab.cli.common import DATA_DIR, DATA_DIR_HELP
from offload_lab.cli.common import print_json as _print_json


# --- model -------------------------------------------------------------------------------------------------------

def cmd_model_tiny(args: argparse.Namespace) -> int:
    from offload_lab.core.inputs import check_dir
    from offload_lab.server import tinymodel

    t0 = time.monotonic()
    out = check_dir(args.out, "--out", write=True)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        # The build is deterministic: rebuilding the same model is harmless, replacing another one is not.
        spec = tinymodel.load_model_spec(args.config or tinymodel.default_model_config())
        changed = [n for n, data in tinymodel.render_files(spec, args.seed).items()
                   if (out / n).exists() and (out / n).read_bytes() != data]
        if changed:
            raise InputError(f"--out {out} holds another model ({', '.join(sorted(changed)[:3])} would change); "
                             "pass --force to replace it, or choose another directory")
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
    from offload_lab.campaigns.progress import Progress
    from offload_lab.core import progress as core_progress, runs
    from offload_lab.core.signals import SIGNALS, Stopped, reason_of, stopping_on_signals
    from offload_lab.server import stack

    runs.check_name("--campaign", args.campaign)
    st = stack.load_stack(args.stack)
    # SIGINT, SIGTERM and SIGHUP end serving alike (a signal while booting stops the boot, recorded as interrupted):
    # the server's process group is stopped and the boot records the signal as the reason.
    reason = None
    with stopping_on_signals():
        # The boot's phases, read from the server's log, as a campaign shows them (a bar on a terminal, else lines).
        with Progress("auto") as display, core_progress.to(display):
            server = stack.start_server(st, Path(args.data_dir), args.campaign, port=args.port,
                                        ready_timeout_s=args.ready_timeout)
        try:
            print(f"server ready at {server.url} (model {server.model_name}); log: {server.log_path}", flush=True)
            print("press Ctrl-C to stop it", flush=True)
            while server.alive():
                time.sleep(0.5)
        except Stopped as e:
            reason = reason_of(e)
        except BaseException:
            server.stop(reason="offload-lab serve failed")
            raise
    # Stopping takes at most the stack's stop timeout; a second signal meanwhile must not leave it half done.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        info = server.stop(reason=reason or "the server exited on its own")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if reason is None:
        print(f"the server exited on its own (return code {info.get('returncode')}); log: {server.log_path}",
              file=sys.stderr)
        return 3
    print(f"server stopped ({reason}; {info.get('signal')}); boot recorded in {server.run.path}")
    return 0


# --- runs --------------------------------------------------------------------------------------------------------

def cmd_runs_list(args: argparse.Namespace) -> int:
    from offload_lab.core import runs

    rows = []
    for row in runs.scan_runs(Path(args.data_dir), args.campaign, args.experiment):
        m = row.manifest or {}
        rows.append({"run": str(row.path), "experiment": m.get("experiment", row.path.parent.name),
                     "outcome": row.status, "started_at": m.get("started_at"), "problem": row.problem})
    if args.json:
        _print_json(rows)
    else:
        for r in rows:
            print(f"{r['outcome']:9} {r['started_at'] or '-':27}  {r['run']}"
                  + (f"\n          {r['problem']}" if r["problem"] else ""))
        if not rows:
            print(f"no runs under {Path(args.data_dir) / args.campaign}")
    # A damaged manifest is a bad input for whoever reads this campaign: say so in the exit status too.
    return 2 if any(r["problem"] for r in rows) else 0


def cmd_runs_verify(args: argparse.Namespace) -> int:
    """Each run's outcome, and every file missing, changed or added since it ended. Exit 1 when a run has a problem
    (or is not finished), 2 when a directory is not a readable run."""
    from offload_lab.core import runs

    worst = 0
    for d in args.run_dirs:
        try:
            m = runs.load_manifest(Path(d))
            problems = runs.verify_run(Path(d))
        except InputError as e:
            print(f"{runs.CORRUPT:9} {d}: {e}", file=sys.stderr)
            worst = 2
            continue
        status = runs.run_status(m)
        error = f" ({m.get('error')})" if m.get("error") else ""
        if problems:
            worst = max(worst, 1)
            print(f"{status:9} {d}{error}: {len(problems)} problem(s)", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
        else:
            print(f"{status:9} {d}{error}: every file matches the manifest")
    return worst


# --- environment -------------------------------------------------------------------------------------------------

def cmd_env(args: argparse.Namespace) -> int:
    from offload_lab.core import environment

    _print_json(environment.capture_environment(include_all_packages=args.all_packages))
    return 0


# --- paper -------------------------------------------------------------------------------------------------------

HAND_RUN_HELP = ("also read this run made by hand (papermill or Jupyter outside `campaign run`; `all`: every one); "
                 "the paper marks it \"by hand\" where it prints its figures and counts it in Limits. Without it, "
                 "a paper reads only the runs of its campaign's sessions. Repeatable")

def _ask_hand_runs(args: argparse.Namespace) -> None:
    """--hand-run goes to the selection through the environment, so that Quarto's own hooks read the same runs."""
    from offload_lab.paper.selection import HAND_RUNS_ENV

    if getattr(args, "hand_run", None):
        os.environ[HAND_RUNS_ENV] = ",".join(args.hand_run)


def cmd_paper_build(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    from offload_lab.core import paths

    from offload_lab.core.places import check_output

    t0 = time.monotonic()
    _ask_hand_runs(args)
    # A relative --data-dir is the repository's (as for `campaign run`), so a build from a subdirectory reads the
    # data the campaign wrote.
    data_root = paths.data_root(args.data_dir)
    # The paper's outputs are not data: inside the data tree they would read as corrupt runs; the PDF and the
    # bundle written over each other would leave neither whole.
    for flag, place, other in (("--out", args.out, ("--bundle", args.bundle)),
                               ("--bundle", args.bundle, ("--out", args.out))):
        if place is not None:
            check_output(place, flag, "dir", outside={"the data tree (--data-dir)": data_root},
                         others=dict([other]))
    result = paper.build_paper(
        campaign=args.campaign, data_root=data_root, out_dir=Path(args.out) if args.out else None,
        repo_root=Path(args.root) if args.root else None, frozen=args.frozen,
        bundle=Path(args.bundle) if args.bundle else None,
    )
    print(f"paper for campaign {args.campaign} built in {time.monotonic() - t0:.1f} s: {result.summary()}")
    for label, path in result.outputs().items():
        print(f"  {label}: {path}")
    import json

    # Runs passed over (their parameters are not the campaign file's, or their manifest cannot be read).
    for s in json.loads(result.claims_json.read_text(encoding="utf-8")).get("skipped") or []:
        print(f"  skipped: run {s['run_id']} of {s['experiment']}: {s['reason']}")
    # Cited runs gone or replaced since the last build or the last commit: the claims of those experiments changed.
    for line in result.fallbacks:
        print(f"  fallback: {line}")
    return 0


def cmd_paper_prepare(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    if skipped := paper.hook_skipped("prepare", Path(args.out) if args.out else None, args.root):
        print(skipped)
        return 0
    _ask_hand_runs(args)
    result = paper.prepare(campaign=args.campaign, data_root=Path(args.data_dir) if args.data_dir else None,
                           out_dir=Path(args.out) if args.out else None,
                           repo_root=Path(args.root) if args.root else None)
    print(f"claims and figures written to {result}")
    return 0


def cmd_paper_audit(args: argparse.Namespace) -> int:
    from offload_lab.paper import build as paper

    if not (args.claims or args.pdf or args.html) and (skipped := paper.hook_skipped("audit")):
        print(skipped)
        return 0
    report = paper.audit(
        claims_json=Path(args.claims) if args.claims else None, pdf=Path(args.pdf) if args.pdf else None,
        html=Path(args.html) if args.html else None, repo_root=Path(args.root) if args.root else None,
    )
    print("audit passed: " + ", ".join(report.checked))
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
    pt.add_argument("--seed", type=nonneg_int, default=None, help="weight seed (default: the config's seed)")
    pt.add_argument("--force", action="store_true", help="replace a different model already in --out")
    finish_parser(pt, cmd_model_tiny, json_help="print the files and their sha256 as JSON")

    # serve
    ps = sub.add_parser("serve", help="start a vLLM server from a stack file and keep it until Ctrl-C",
                        description="Start the server a stack file describes, bound to 127.0.0.1, wait until "
                                    "/health and /v1/models answer, and keep it running until Ctrl-C or SIGTERM. "
                                    "Each start is a run of the 'boots' experiment: the server log and the "
                                    "classified outcome (ready, oom_load, oom_kv_cache, init_failure, exited, "
                                    "timeout, died_first_request, probe_failed: a probe request is sent once "
                                    "ready) are kept.")
    ps.add_argument("--stack", required=True, help="stack file, e.g. configs/stacks/embedded.yaml")
    ps.add_argument("--port", type=port_number, default=None,
                    help="port to bind, 1 to 65535 (default: a free one); an error if taken")
    ps.add_argument("--campaign", default="scratch", help="campaign the boot run is filed under (default: scratch)")
    ps.add_argument("--data-dir", default=DATA_DIR, help=DATA_DIR_HELP)
    ps.add_argument("--ready-timeout", type=seconds, default=None,
                    help="seconds to wait for readiness (default: the stack file's ready_timeout_s)")
    ps.set_defaults(func=cmd_serve)

    # campaign run|check (handlers and help texts in cli/campaign.py)
    from offload_lab.cli import campaign as campaign_cli

    csub = campaign_cli.add_parsers(sub)
    from offload_lab.cli import rehearse as rehearse_cli  # campaign rehearse (cli/rehearse.py)

    rehearse_cli.add_parser(csub)

    # runs
    rsub = action_group(sub, "runs", "list and verify run directories",
                        "Inspect the data tree: list runs, verify files against manifests.")
    prl = rsub.add_parser("list", help="list the runs of a campaign", description="List runs with outcome and start.")
    prl.add_argument("--campaign", required=True, help="campaign name (a directory under the data root)")
    prl.add_argument("--experiment", default=None, help="only this experiment")
    finish_parser(prl, cmd_runs_list, data_dir=True, json_help="print JSON")
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
    psub = action_group(sub, "paper", "build the paper from a campaign's data",
                        "Resolve every claim from data files, draw figures, render PDF and HTML, and "
                        "audit the result for numbers no claim produced.")
    fails = ("Exits non-zero naming the claim and file when a data file is missing or changed, or a claim cannot "
             "be computed; and naming the number and its place when the audit finds a number no claim produced.")
    q = psub.add_parser("build", help="resolve claims, draw figures, render PDF and HTML, audit",
                        description="Resolve every claim from the campaign's data, draw the figures, render PDF and "
                                    "HTML (quarto render where Quarto is installed, else pandoc and Typst), and "
                                    "audit the result. " + fails)
    q.add_argument("--campaign", default="embedded", help="campaign whose data the paper reads (default: embedded)")
    q.add_argument("--data-dir", default=DATA_DIR, help=DATA_DIR_HELP)
    q.add_argument("--out", default=None, help="output directory (default: _output/<campaign>)")
    q.add_argument("--root", default=None, help="repository root holding paper/ and _quarto.yml (default: found)")
    q.add_argument("--hand-run", action="append", default=None, metavar="RUN_ID", help=HAND_RUN_HELP)
    q.add_argument("--frozen", action="store_true",
                   help="also check every file the paper reads against its committed version in git (for a release)")
    q.add_argument("--bundle", default=None, metavar="DIR",
                   help="also write DIR: the HTML paper with every data file and notebook it links to, links relative")
    q.set_defaults(func=cmd_paper_build)
    q = psub.add_parser("prepare", help="resolve claims and draw figures only (Quarto's pre-render hook)",
                        description="Write claims.json, the provenance table, the figures and sections.qmd (the "
                                    "experiment folders' section*.qmd assembled by topic) that the paper includes; "
                                    "Quarto runs this before rendering. " + fails)
    q.add_argument("--campaign", default=None,
                   help="campaign (default: $OFFLOAD_LAB_CAMPAIGN, else the one paper.qmd names)")
    q.add_argument("--data-dir", default=None, help="root of the data tree (default: $OFFLOAD_LAB_DATA_ROOT, else data)")
    q.add_argument("--out", default=None, help="output directory (default: paper/_generated)")
    q.add_argument("--hand-run", action="append", default=None, metavar="RUN_ID", help=HAND_RUN_HELP)
    q.add_argument("--root", default=None, help="repository root holding paper/ and _quarto.yml (default: found)")
    q.set_defaults(func=cmd_paper_prepare)
    q = psub.add_parser("audit", help="audit a rendered paper for numbers no claim produced (Quarto's post-render hook)",
                        description="Lint paper/*.qmd for numerals typed into prose, then read the rendered PDF and "
                                    "HTML and fail on any number no claim printed, or a leftover shortcode marker.")
    q.add_argument("--claims", default=None, help="claims.json (default: the one prepare wrote)")
    q.add_argument("--pdf", default=None, help="rendered PDF (default: Quarto's _manuscript/paper/paper.pdf)")
    q.add_argument("--html", default=None, help="rendered HTML (default: Quarto's _manuscript/paper/index.html)")
    q.add_argument("--root", default=None, help="repository root (default: found)")
    q.set_defaults(func=cmd_paper_audit)

    # quality, capacity, profile (handlers and flags in cli/quality_parsers.py and cli/seats.py)
    from offload_lab.cli import quality_parsers, seats as seats_cli

    quality_parsers.add_parsers(sub)
    seats_cli.add_parsers(sub)

    # audit, plan make|check|show, memory-math, checkpoint synth, routing collect ("will it fit"; handlers and
    # help texts in cli/fit.py, so this shared module only gains these lines)
    from offload_lab.cli import fit as fit_cli

    fit_cli.add_parsers(sub)
    # stack install|check, boots list, campaign ledger (handlers and help texts in cli/pod.py)
    from offload_lab.cli import pod as pod_cli

    pod_cli.add_parsers(sub, csub)
    from offload_lab.cli import pods as pods_cli  # pod plan|merge|ledger: SkyPilot (handlers in cli/pods.py)

    pods_cli.add_parsers(sub)
    from offload_lab.cli import podpredict; podpredict.add_parsers(sub)  # pod predict, pod model check
    from offload_lab.cli import notebooks as notebooks_cli

    notebooks_cli.add_parsers(sub)
    from offload_lab.cli import bench as bench_cli  # bench, clock-check, compare(-vllm), scrape-cost, bench-data

    bench_cli.add_parsers(sub)
    from offload_lab.cli import report as report_cli; report_cli.add_parsers(sub)  # report CAMPAIGN (cli/report.py)

    return p


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except Exception as e:  # noqa: BLE001 (a broken install must not print a bare traceback either)
        from offload_lab.cli.common import internal_error

        print(internal_error(e), file=sys.stderr)
        return INTERNAL
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse refused a flag (exit 2, message printed) or printed --help (0)
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        # A group given without its action: show that group's help rather than a traceback.
        chosen = [a for a in parser._subparsers._group_actions[0].choices.values()  # type: ignore[union-attr]
                  if a.prog.endswith(" " + str(args.command))] if args.command else []
        (chosen[0] if chosen else parser).print_help(sys.stderr)
        return 2
    return run_handler(args)


def run_handler(args: argparse.Namespace) -> int:
    """One rule for every command: a known error prints its message and exits with its code (bad input: 2); an
    unforeseen one prints one line naming a log that holds the traceback and exits INTERNAL (70). Never a bare
    traceback, and never a URL's credentials, in what is printed."""
    from offload_lab.cli.common import internal_error

    from offload_lab.core import signals

    try:
        # SIGTERM and SIGHUP end a command as SIGINT does, so every run it writes is finished as stopped.
        with signals.stopping_on_signals():
            return int(args.func(args) or 0)
    except OffloadLabError as e:
        print(f"offload-lab: error: {redact_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        print(f"offload-lab: {signals.reason_of(e)}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`offload-lab runs list | head`): not an error of ours. Silence the final flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
    except Exception as e:  # noqa: BLE001 (the point: nothing unforeseen leaves as a traceback)
        print(internal_error(e, args), file=sys.stderr)
        return INTERNAL


if __name__ == "__main__":
    sys.exit(main())
