"""``offload-lab``: one command with a subcommand per job. ``offload-lab SUBCOMMAND --help`` explains each."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any, Callable

from offload_lab import __version__
from offload_lab.core.errors import INTERNAL, OffloadLabError
from offload_lab.core.redact import redact_text

from offload_lab.cli.common import action_group, calling, port_number, print_json
from offload_lab.cli.model_options import Command, Option, add_commands


def cmd_serve(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.campaigns.progress import Progress
    from offload_lab.server.commands import serve

    # The boot's phases, read from the server's log, as a campaign shows them (a bar on a terminal, else lines).
    return serve(p, display=lambda: Progress("auto"), say=lambda line: print(line, flush=True))


def cmd_runs_verify(p: Any, args: argparse.Namespace) -> int:
    """Exit 1 when a run has a problem (or is not finished), 2 when a directory is not a readable run."""
    from offload_lab.core.commands import verify_runs

    worst = 0
    for r in verify_runs(p.run_dirs):
        error = f" ({r['error']})" if r["error"] else ""
        if r["unreadable"]:
            print(f"{r['status']:9} {r['run']}: {r['unreadable']}", file=sys.stderr)
            worst = 2
        elif r["problems"]:
            worst = max(worst, 1)
            print(f"{r['status']:9} {r['run']}{error}: {len(r['problems'])} problem(s)", file=sys.stderr)
            print("\n".join(f"  {x}" for x in r["problems"]), file=sys.stderr)
        else:
            print(f"{r['status']:9} {r['run']}{error}: every file matches the manifest")
    return worst


def cmd_env(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.core import environment

    print_json(environment.capture_environment(include_all_packages=p.all_packages))
    return 0


def cmd_paper_build(p: Any, args: argparse.Namespace) -> int:
    from offload_lab.paper import commands

    t0 = time.monotonic()
    result, skipped = commands.build(p)
    print(f"paper for campaign {p.campaign} built in {time.monotonic() - t0:.1f} s: {result.summary()}")
    for label, path in result.outputs().items():
        print(f"  {label}: {path}")
    for s in skipped:
        print(f"  skipped: run {s['run_id']} of {s['experiment']}: {s['reason']}")
    # Cited runs gone or replaced since the last build or the last commit: the claims of those experiments changed.
    for line in result.fallbacks:
        print(f"  fallback: {line}")
    return 0


def _line(func: Callable[[Any], str]) -> Callable[[Any, argparse.Namespace], int]:
    return lambda p, args: print(func(p)) or 0


# The modules that register their own subcommands (each an add_parsers(sub)), in the order --help lists them, with
# the top-level names each registers: a command line that names one builds only its module's parser, so that the
# models of the other commands (scipy, pandas, aiohttp behind them) are not imported (tests/test_cli_names.py checks
# the names against the whole parser).
MODULES = {"quality_parsers": ("quality",), "seats": ("capacity", "profile"),
           "fit": ("audit", "memory-math", "plan", "checkpoint", "routing"), "pod": ("stack", "boots"),
           "pods": ("pod",), "podpredict": ("pod", "compare-prediction"), "notebooks": ("notebooks",),
           "bench": ("bench", "clock-check", "compare", "compare-vllm", "scrape-cost", "bench-data"),
           "report": ("report",)}
OWN = ("model", "serve", "env", "runs", "paper", "campaign")  # registered here (campaign: with cli/campaign.py)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (a top-level name), only what that command needs."""
    p = argparse.ArgumentParser(
        prog="offload-lab", description="Measure what it costs to serve a mixture-of-experts model with experts "
        "offloaded to host RAM: start the server from a stack file, run the campaign's notebooks, and build the "
        "paper whose every number traces to a data file.")
    p.add_argument("--version", action="version", version=f"offload-lab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="SUBCOMMAND")
    known = command in OWN or any(command in names for names in MODULES.values())
    if known and command not in OWN:
        for name, names in MODULES.items():
            if command in names:
                importlib.import_module(f"offload_lab.cli.{name}").add_parsers(sub)
        return p
    from offload_lab.core import commands as core
    from offload_lab.paper import commands as paper
    from offload_lab.server import commands as server

    hand = {"hand_run": Option(repeat=True, metavar="RUN_ID")}
    add_commands(action_group(sub, "model", "build models (the embedded tiny MoE)",
                              "Build models that the project serves without downloading weights."), [
        Command("tiny", "build the embedded tiny random-weight MoE", calling("offload_lab.server.commands:tiny"),
                server.TinyModelParams,
                description="Build the embedded default model: a tiny random-weight Qwen-MoE with a locally trained "
                            "byte-level BPE tokenizer. Deterministic: the same seed, the same sha256 for every file.",
                json="print the files and their sha256 as JSON")])
    add_commands(sub, [
        Command("serve", "start a vLLM server from a stack file and keep it until Ctrl-C", cmd_serve,
                server.ServeParams, options={"port": Option(parse=port_number, metavar="PORT")}, json=None,
                description="Start the server a stack file describes on 127.0.0.1, wait until it answers, and keep "
                            "it until Ctrl-C or SIGTERM. Each start is a run of the 'boots' experiment (its log and "
                            "classified outcome kept; docs/cli.md)."),
        Command("env", "print what this machine is (Python, packages, CPU, memory, GPUs, topology)", cmd_env,
                core.EnvParams, description="Print the environment record every manifest carries, as JSON.",
                json=None)])
    add_commands(action_group(sub, "runs", "list and verify run directories",
                              "Inspect the data tree: list runs, verify files against manifests."), [
        Command("list", "list the runs of a campaign", calling("offload_lab.core.commands:runs_list"),
                core.RunsListParams),
        Command("verify", "check every file of runs against their manifests' sha256", cmd_runs_verify,
                core.RunsVerifyParams, options={"run_dirs": Option(positional=True, metavar="run_dirs")},
                description="Exit non-zero, naming the file, when a file is missing, changed or added.", json=None)])
    add_commands(action_group(sub, "paper", "build the paper from a campaign's data",
                              "Resolve every claim from data files, draw figures, render PDF and HTML, and audit "
                              "the result for numbers no claim produced (docs/paper.md)."), [
        Command("build", "resolve claims, draw figures, render PDF and HTML, audit", cmd_paper_build,
                paper.PaperBuildParams, options=hand | {"bundle": Option(metavar="DIR")}, json=None),
        Command("prepare", "resolve claims and draw figures only (Quarto's pre-render hook)",
                _line(paper.prepare), paper.PaperPrepareParams, options=hand, json=None),
        Command("audit", "audit a rendered paper for numbers no claim produced (Quarto's post-render hook)",
                _line(paper.audit), paper.PaperAuditParams, json=None)])
    from offload_lab.cli import campaign, rehearse

    rehearse.add_parser(campaign.add_parsers(sub))  # campaign run|check|ledger, and rehearse
    for name in MODULES if not known else ():
        importlib.import_module(f"offload_lab.cli.{name}").add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # without building the parser: the quickest answer there is
        print(f"offload-lab {__version__}")
        return 0
    try:
        parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
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
