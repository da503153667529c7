"""``offload-lab campaign run`` and ``campaign check``: run a campaign's notebooks (going on past a failed one, exit 4
at the end naming each failure and skip), or validate its file."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offload_lab.cli.common import action_group, http_url, port_number
from offload_lab.cli.common import DATA_DIR, DATA_DIR_HELP
from offload_lab.core.errors import InputError, OffloadLabError
from offload_lab.core.redact import redact_text

if TYPE_CHECKING:
    from offload_lab.campaigns.runner import CampaignResult


def cmd_campaign_run(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner as campaign
    from offload_lab.campaigns.depends import CampaignFailed
    from offload_lab.core.inputs import check_dir

    from offload_lab.campaigns.progress import Progress
    from offload_lab.core import progress as core_progress

    from offload_lab.core import paths as core_paths

    # Before any server is started or reached; a relative --data-dir is the repository's, as run_campaign takes it.
    check_dir(core_paths.data_root(args.data_dir), "--data-dir", write=True)
    if args.paper:  # the paper's sources are linted before any notebook runs, not after hours of them
        from offload_lab.core import paths
        from offload_lab.paper.build import check_sources

        check_sources(paths.find_root())
    only = [x.strip() for x in args.only.split(",") if x.strip()] if args.only is not None else None
    if only is not None and not only:
        raise InputError(f"--only {args.only!r} names no experiment; give comma-separated experiment names, or leave "
                         "--only out to run them all")
    c = campaign.load_campaign(args.file)
    count = len([e for e in c.spec.experiments if not only or e.experiment in only])
    mode = "json" if args.json else "quiet" if args.quiet else "auto"
    failed: Exception | None = None
    result: CampaignResult | None = None
    # The display is also where this process's long steps (a server's boot, its phases) say how far they got.
    with Progress(mode, campaign=c.spec.name, experiments=count,
                  file=sys.stdout if args.json else None) as progress, core_progress.to(progress):
        try:
            result = campaign.run_campaign(c, data_root=args.data_dir, url=args.url, port=args.port,
                                           only=only, progress=progress, fail_fast=args.fail_fast)
        except CampaignFailed as e:  # it ran all it could: report it, build the paper, then exit 4
            result, failed = e.result, e
        finally:
            progress.summary(notes=_campaign_notes(result, args.data_dir) if result is not None else ())
    if args.paper and result is not None:
        _campaign_paper(result, partial=failed is not None, quiet=args.json)
    if failed is not None:
        raise failed  # its message names each failure and skip; exit 4
    return 0


def _campaign_notes(result: CampaignResult, data_dir: str | Path | None = None) -> list[str]:
    """What the summary adds below its list of experiments (whose runs it names already): boot attempts, where the
    output notebooks are, the ledger, with a command to run that carries the --data-dir this run used."""
    from offload_lab.campaigns.steps import OUTPUT_NOTEBOOK

    notes = []
    for a in result.boot_attempts:
        expected = "" if a["expected"] is None else f" (expected {a['expected']})"
        notes.append(f"boot attempt {a['boot']}: {a['outcome']}{expected}: {a['run']}")
    if result.runs:
        notes.append(f"each run directory holds its data and its output notebook ({OUTPUT_NOTEBOOK})")
    if result.session:
        flags = "" if data_dir is None or str(data_dir) == str(DATA_DIR) else f" --data-dir {shlex.quote(str(data_dir))}"
        notes.append(f"ledger session {result.session}: `offload-lab campaign ledger {result.campaign}{flags}`")
    return notes


def _campaign_paper(result: CampaignResult, partial: bool, quiet: bool) -> None:
    """The paper from the campaign's data. After a partial campaign it is built too (its sections whose experiment
    has no ok run say they are left out), and a build error is printed rather than raised: the campaign's own
    failure (exit 4) is what the exit status says."""
    from offload_lab.core import paths
    from offload_lab.paper import build as paper

    out = sys.stderr if quiet else sys.stdout
    try:
        # The data the campaign just wrote and the paper of the same checkout, from any working directory.
        built = paper.build_paper(campaign=result.campaign, data_root=result.data_root, repo_root=paths.find_root())
    except OffloadLabError as e:
        if not partial:
            raise
        print(f"  paper not built after the partial campaign: {redact_text(str(e))}", file=out)
        return
    for label, path in built.outputs().items():
        print(f"  paper {label}: {path}", file=out)
    if partial:
        print("  the paper leaves out the sections of the experiments that failed or were skipped", file=out)


def cmd_campaign_check(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner as campaign

    c = campaign.load_campaign(args.file)
    campaign.validate(c)
    # The paper's sources too, where a checkout holds them: a line Quarto refuses fails the render hours later.
    from offload_lab.core import paths
    from offload_lab.paper.build import check_quarto_sources

    if (paths.find_root() / "paper" / "paper.qmd").is_file():
        check_quarto_sources(paths.find_root())
    print(f"campaign file {args.file} is valid: {len(c.spec.experiments)} experiment(s)")
    # What is skipped when what it reads fails (after:, and what the parameters name).
    for name, deps in campaign.dependencies(c).items():
        if deps:
            print(f"  {name} reads the runs of {', '.join(deps)}")
    return 0


def add_parsers(sub: Any) -> Any:
    """The ``campaign`` group with its ``run`` and ``check``; returns the group (other modules add to it)."""
    csub = action_group(sub, "campaign", "run or check a campaign of experiments",
                        "Campaigns list notebooks and their parameters (configs/campaigns/*.yaml).")
    pcr = csub.add_parser("run", help="start the stack's server, execute every notebook, stop the server",
                          description="Execute each experiment's notebook through papermill into a new run "
                                      "directory data/<campaign>/<experiment>/<run-id>/ with its manifest. A "
                                      "parameter the notebook does not declare is an error (exit 2, before anything "
                                      "runs). A failing notebook keeps its run marked failed, and the campaign goes "
                                      "on with every experiment that does not read its runs (`after:` in the "
                                      "campaign file, or what its parameters name); those that do are skipped. A "
                                      "server that does not start fails the experiments on that variant only. At "
                                      "the end a summary names each failure (run directory, the error's first line) "
                                      "and each skip, and the exit status is 4 if any experiment failed. Ctrl-C or "
                                      "SIGTERM stops the whole campaign.")
    pcr.add_argument("file", help="campaign file, e.g. configs/campaigns/embedded.yaml")
    pcr.add_argument("--url", type=http_url, default=None,
                     help="use this running server instead of starting the campaign's stack (its base URL, no "
                          "query; user:password@ is kept out of the notebooks' parameters)")
    pcr.add_argument("--port", type=port_number, default=None, help="port for the server the campaign starts")
    pcr.add_argument("--data-dir", default=DATA_DIR, help=DATA_DIR_HELP)
    pcr.add_argument("--only", default=None,
                     help="comma-separated experiment names to run, 'boots' for the boot attempts (default: all)")
    pcr.add_argument("--paper", action="store_true",
                     help="then build the paper from its data (as `paper build --campaign`); after a partial "
                          "campaign too: the sections whose experiment has no ok run are left out, and the exit "
                          "status is still 4")
    pcr.add_argument("--fail-fast", action="store_true",
                     help="stop the campaign at the first failing experiment (its run kept, marked failed) instead "
                          "of going on with the others")
    shown = pcr.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true",
                       help="plain timestamped lines instead of the live display: each experiment as it starts and "
                            "ends, each server boot's phase, the counts of long steps, a 'still running' line whenever "
                            "10 s pass without one, then a summary (the default when the output is not a terminal)")
    shown.add_argument("--json", action="store_true",
                       help="one JSON object per line on stdout for every event (experiment, cell, count, phase, "
                            "end, done, summary), for scripts")
    pcr.set_defaults(func=cmd_campaign_run)
    pcc = csub.add_parser("check", help="validate a campaign file and its notebooks' parameters without running",
                          description="Check that every notebook exists and declares every parameter passed, "
                                      "that the parameters are valid, and that what each experiment reads (its "
                                      "`after:` list and the experiments its parameters name) is an experiment "
                                      "listed before it, with no circle; print those dependencies.")
    pcc.add_argument("file", help="campaign file")
    pcc.set_defaults(func=cmd_campaign_check)
    return csub
