"""What the command line asks of campaigns: the parameters of ``campaign run|check|ledger`` and ``stack check`` (the
stack a campaign starts, its plan formats read as the offload part reads them) (their flags come from
these models through ``cli/model_options.py``) and the work behind them, tested without the command line."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from pydantic import Field

from offload_lab.core import paths
from offload_lab.core.commands import CAMPAIGN_HELP, Params, data_dir_field
from offload_lab.core.errors import InputError, OffloadLabError
from offload_lab.core.outcome import Outcome
from offload_lab.core.redact import redact_text


class CampaignRunParams(Params):
    file: str = Field(description="campaign file, e.g. configs/campaigns/embedded.yaml")
    url: str | None = Field(None, description="use this running server instead of starting the campaign's stack (its "
                                              "base URL; user:password@ is kept out of the notebooks' parameters)")
    port: int | None = Field(None, ge=1, le=65535, description="port for the server the campaign starts")
    data_dir: str = data_dir_field()
    only: str | None = Field(None, description="comma-separated experiment names to run, 'boots' for the boot "
                                               "attempts (default: all)")
    paper: bool = Field(False, description="then build the paper from its data, after a partial campaign too (its "
                                           "failed sections left out; the exit status still 4)")
    fail_fast: bool = Field(False, description="stop at the first failing experiment (its run kept, marked failed)")
    quiet: bool = Field(False, description="plain timestamped lines instead of the live display (the default when "
                                           "the output is not a terminal)")

    def experiments(self) -> list[str] | None:
        """--only as a list (None: every experiment); an --only that names nothing is refused."""
        if self.only is None:
            return None
        only = [x.strip() for x in self.only.split(",") if x.strip()]
        if not only:
            raise InputError(f"--only {self.only!r} names no experiment; give comma-separated experiment names, or "
                             "leave --only out to run them all")
        return only


class CampaignCheckParams(Params):
    file: str = Field(description="campaign file")


class LedgerParams(Params):
    campaign: str = Field(description=CAMPAIGN_HELP)
    data_dir: str = data_dir_field()


class StackCheckParams(Params):
    file: str = Field(description="stack file")


def run(p: CampaignRunParams, json: bool) -> None:
    """Run the campaign with its display (live, quiet lines, or JSON events on stdout), then with ``p.paper`` build
    the paper; a campaign that ran all it could but failed raises CampaignFailed (exit 4) after both."""
    from offload_lab.campaigns import runner
    from offload_lab.campaigns.depends import CampaignFailed
    from offload_lab.campaigns.progress import Progress
    from offload_lab.core import progress as core_progress
    from offload_lab.core.inputs import check_dir

    # Before any server is started or reached; a relative --data-dir is the repository's, as run_campaign takes it.
    check_dir(paths.data_root(p.data_dir), "--data-dir", write=True)
    if p.paper:  # the paper's sources are linted before any notebook runs, not after hours of them
        from offload_lab.paper.build import check_sources

        check_sources(paths.find_root())
    only = p.experiments()
    c = runner.load_campaign(p.file)
    count = len([e for e in c.spec.experiments if not only or e.experiment in only])
    failed: Exception | None = None
    result: Any = None
    # The display is also where this process's long steps (a server's boot, its phases) say how far they got.
    with Progress("json" if json else "quiet" if p.quiet else "auto", campaign=c.spec.name, experiments=count,
                  file=sys.stdout if json else None) as progress, core_progress.to(progress):
        try:
            result = runner.run_campaign(c, data_root=p.data_dir, url=p.url, port=p.port, only=only,
                                         progress=progress, fail_fast=p.fail_fast)
        except CampaignFailed as e:  # it ran all it could: report it, build the paper, then exit 4
            result, failed = e.result, e
        finally:
            progress.summary(notes=campaign_notes(result, p.data_dir) if result is not None else ())
    if p.paper and result is not None:
        campaign_paper(result, partial=failed is not None, out=sys.stderr if json else sys.stdout)
    if failed is not None:
        raise failed  # its message names each failure and skip; exit 4


def campaign_notes(result: Any, data_dir: str | Path | None = None) -> list[str]:
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
        same = data_dir is None or str(data_dir) == paths.DATA_DIR
        flags = "" if same else f" --data-dir {shlex.quote(str(data_dir))}"
        notes.append(f"ledger session {result.session}: `offload-lab campaign ledger --campaign {result.campaign}"
                     f"{flags}`")
    return notes


def campaign_paper(result: Any, partial: bool, out: TextIO) -> None:
    """The paper from the campaign's data. After a partial campaign it is built too (its sections whose experiment
    has no ok run say they are left out), and a build error is printed rather than raised: the campaign's own
    failure (exit 4) is what the exit status says."""
    from offload_lab.paper import build as paper

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


def check(p: CampaignCheckParams) -> dict[str, Any]:
    """Validate the campaign file (and the paper's sources, where a checkout holds them: a line Quarto refuses fails
    the render hours later); returns what each experiment reads."""
    from offload_lab.campaigns import runner
    from offload_lab.paper.build import check_quarto_sources

    c = runner.load_campaign(p.file)
    runner.validate(c)
    if (paths.find_root() / "paper" / "paper.qmd").is_file():
        check_quarto_sources(paths.find_root())
    return {"experiments": len(c.spec.experiments), "reads": runner.dependencies(c)}


def ledger(p: LedgerParams) -> dict[str, Any]:
    """The campaign's sessions and their totals; a line that parses but lacks what a session needs is damage,
    reported with a count (exit 2), not a crash."""
    from offload_lab.campaigns import ledger as ledgermod

    sessions = ledgermod.read_ledger(Path(p.data_dir), p.campaign)
    damaged = [s.get("session") for s in sessions if not isinstance(s.get("started_at"), str)
               or (not s.get("open") and not isinstance(s.get("minutes"), (int, float)))]
    if damaged:
        raise InputError(f"ledger {ledgermod.ledger_path(Path(p.data_dir), p.campaign)}: {len(damaged)} session(s) "
                         f"with damaged lines (no start time or no minutes), e.g. {damaged[:3]}; restore the file "
                         "from the data's version control")
    return {"sessions": sessions, "totals": ledgermod.totals(sessions)}


def stack_report(file: str) -> dict[str, Any]:
    """What ``stack check`` prints: the server command, its environment (secret-looking values masked), the plan and
    its format, the price, the unpinned items, CPUs not allowed here. A plan not in the format the offload part
    reads is an InputError naming what to do."""
    from offload_lab.core.redact import MASK, looks_secret, redact_args, redact_record
    from offload_lab.fit import plan_formats
    from offload_lab.server import multinode, stack
    from offload_lab.server.interpreter import check_interpreter

    st = stack.load_stack(file)
    interpreter = check_interpreter(st)  # it runs, is a Python, and has server.module (when installed here)
    server = st.spec.server
    env = {k: (MASK if v is not None and looks_secret(k) else v) for k, v in stack.server_env(st).items()}
    out = {"stack": st.spec.name, "file": str(st.file), "extends": st.spec.extends,
           "command": redact_args(stack.server_command(st, "127.0.0.1", 8000)),
           "env": env, "env_from": list(server.env_from),
           "plan": str(st.plan_path) if st.plan_path else None,
           "price": st.spec.price.model_dump() if st.spec.price else None, "unpinned": stack.unpinned_items(st.spec),
           "cpus_not_here": sorted(set(server.cpus or ()) - os.sched_getaffinity(0)), "interpreter": interpreter}
    out = redact_record(out)  # credentials in URLs, secret flags' values: masked wherever they are
    multinode.check_ray_env(st.spec.pod, stack.server_env(st), list(server.env_from), str(file))
    out["plan_format"], plan_problems = plan_formats.stack_plan_report(st)
    if plan_problems:
        raise InputError(f"stack file {file}: the plan the offload part would get is not in the format it "
                         f"reads or does not cover the model:\n  " + "\n  ".join(plan_problems)
                         + f"\nrun `offload-lab stack install {file}` (it writes each plan as "
                           f"{out['plan_format']['format']}), or fix the file by hand")
    return out


def stack_check(p: StackCheckParams) -> Outcome:
    """:func:`stack_report` as ``stack check`` shows it."""
    out = stack_report(p.file)
    lines: list[str] = []
    write = lines.append
    write(f"stack file {p.file} is valid ({out['stack']})")
    if out["plan_format"]:
        lines += _plan_format_lines(out["plan_format"])
    write("  server command: " + " ".join(out["command"]))
    for k, v in out["env"].items():
        write(f"  env {k}={'(unset)' if v is None else v}")
    for k in out["env_from"]:
        write(f"  env {k}=(from the environment: {'set' if k in os.environ else 'NOT SET here'})")
    if out["cpus_not_here"]:
        write(f"  warning: server.cpus {out['cpus_not_here']} are not CPUs this machine lets us use "
              f"({sorted(os.sched_getaffinity(0))}); the server would start on the others only")
    if out["price"]:
        write(f"  price: {out['price']['per_hour']} {out['price']['currency']} an hour ({out['price']['source']})")
    if out["unpinned"]:
        write(f"  unpinned ({len(out['unpinned'])}); `stack install` refuses without --allow-unpinned:")
        write("\n".join(f"    - {u}" for u in out["unpinned"]))
    else:
        write("  every part, patch, download and plan is pinned")
    return Outcome(out, lines)


def _plan_format_lines(info: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    write = lines.append
    rb = info["read_by"]
    who = (f"read by {'patch ' + rb['patch'] + ' of ' if rb.get('patch') else ''}part {rb['part']}" if rb
           else "its reader not declared (plans.read_by)")
    known = ("" if info["reader_known"] or not rb
             else " (offload-lab does not know this reader: format taken as declared)")
    write(f"  plan format the offload part gets: {info['format']}, {who}, path in ${info['env']}{known}")
    if info.get("format_provenance"):
        write(f"    format from: {' '.join(info['format_provenance'].split())}")
    for name, row in info["files"].items():
        mark = " (boots with it)" if name == info["use"] else ""
        state = "present" if row["served_present"] else "not made yet (`stack install` makes it)"
        line = f"    {name}{mark}: {row['served_path']} [{state}]"
        if row["served_path"] != row["path"]:
            line += f", written from {row['path']}"
        if row.get("checked_against"):
            line += (f"; read as the offload part would, against {row['checked_against']}: {row['layers_found']} of "
                     f"{row['moe_layers']} MoE layers found, {row['host_experts']:,} host experts")
        write(line)
    return lines


def ledger_outcome(p: LedgerParams) -> Outcome:
    """:func:`ledger` as ``campaign ledger`` shows it."""
    r = ledger(p)
    lines: list[str] = []
    write = lines.append
    for s in r["sessions"]:
        pod = s.get("pod") or {}
        where = f"pod {pod.get('name') or '-'} ({pod.get('gpu_count')} x {pod['gpus'][0]})" if pod.get("gpus") \
            else f"pod {pod.get('name') or '-'} (no GPU)"
        if s.get("open"):
            write(f"{s['session']}  {s['started_at']}  OPEN (no end recorded)  {where}")
            continue
        cost = "-" if s.get("cost") is None else f"{s['cost']:.2f} {s['currency']}"
        write(f"{s['session']}  {s['started_at']} -> {s['ended_at']}  {s['minutes']:.1f} min  {cost}  "
              f"{s['outcome']}  {where}")
    tot = r["totals"]
    costs = ", ".join(f"{v:.2f} {k}" for k, v in tot["cost"].items()) or "no priced session"
    write(f"{tot['sessions']} session(s), {tot['open']} open; {tot['minutes']:.1f} minutes; {costs}")
    return Outcome(r, lines)


def check_outcome(p: CampaignCheckParams) -> Outcome:
    """:func:`check` as ``campaign check`` shows it."""
    r = check(p)
    lines: list[str] = []
    write = lines.append
    write(f"campaign file {p.file} is valid: {r['experiments']} experiment(s)")
    # What is skipped when what it reads fails (after:, and what the parameters name).
    for name, deps in r["reads"].items():
        if deps:
            write(f"  {name} reads the runs of {', '.join(deps)}")
    return Outcome(r, lines)
