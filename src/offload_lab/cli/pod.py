"""Subcommands for running the study on a pod: ``stack install``/``stack check``, ``boots list`` and
``campaign ledger``. Handlers and help texts live here so that the shared ``cli`` module only gains a call to
:func:`add_parsers`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


from offload_lab.cli.common import action_group, finish_parser
from offload_lab.cli.common import print_json as _print_json


# --- stack -------------------------------------------------------------------------------------------------------

def cmd_stack_install(args: argparse.Namespace) -> int:
    from offload_lab.server import install
    from offload_lab.server import stack

    st = stack.load_stack(args.file)
    plan = install.plan_install(st, skip_preflight=args.skip_preflight, skip_model=args.skip_model)
    if args.dry_run:
        sys.stdout.write(plan.render(allow_unpinned=args.allow_unpinned))
        return 0 if args.no_checks else _dry_run_checks(st, args)
    record = install.run_install(plan, allow_unpinned=args.allow_unpinned)
    print(f"stack {st.spec.name} installed into {plan.venv}")
    for name, commit in record["commits"].items():
        print(f"  {name}: {commit}")
    for key, p in record["patches"].items():
        print(f"  patch {key}: sha256 {p.get('sha256')}")
        for f, h in (p.get("receipts") or {}).items():
            print(f"    receipt {f}: {h}")
    if record["unpinned"]:
        print("installed with unpinned items (--allow-unpinned); pin them in the stack file from the values above")
    return 0


def _dry_run_checks(st: Any, args: argparse.Namespace) -> int:
    import tempfile

    from offload_lab.server import install_checks

    print("# checks of every file the install would use (no network; plans made in a scratch directory"
          + (f" from {args.checkpoint})" if args.checkpoint else ")"))
    with tempfile.TemporaryDirectory(prefix="offload-lab-dry-run-") as work:
        problems = install_checks.dry_run_checks(st, work, checkpoint=args.checkpoint, log=lambda s: print(f"#   {s}"))
    for p in problems:
        print(f"# {p}")
    errors = [p for p in problems if p.level == "error"]
    counts = {lvl: len([p for p in problems if p.level == lvl]) for lvl in ("error", "unpinned", "warning")}
    print(f"# {counts['error']} error(s), {counts['unpinned']} unpinned, {counts['warning']} warning(s)"
          + ("" if errors else ": a real install finds every file as the stack file says"))
    if errors:
        print(f"stack file {args.file}: the dry run found {len(errors)} error(s) a real install would stop at "
              "(listed above); fix them in the stack file", file=sys.stderr)
    return 2 if errors else 0


def cmd_stack_check(args: argparse.Namespace) -> int:
    from offload_lab.server import stack

    from offload_lab.core.redact import MASK, looks_secret, redact_args, redact_record

    st = stack.load_stack(args.file)
    from offload_lab.server.interpreter import check_interpreter

    interpreter = check_interpreter(st)  # it runs, is a Python, and has server.module (when installed here)
    unpinned = stack.unpinned_items(st.spec)
    server = st.spec.server
    # Never print a value that looks like a secret, whatever the schema let through.
    env = {k: (MASK if v is not None and looks_secret(k) else v) for k, v in stack.server_env(st).items()}
    cpus_missing = sorted(set(server.cpus or ()) - os.sched_getaffinity(0))
    out = {"stack": st.spec.name, "file": str(st.file), "extends": st.spec.extends,
           "command": redact_args(stack.server_command(st, "127.0.0.1", 8000)),
           "env": env, "env_from": list(server.env_from),
           "plan": str(st.plan_path) if st.plan_path else None,
           "price": st.spec.price.model_dump() if st.spec.price else None, "unpinned": unpinned,
           "cpus_not_here": cpus_missing, "interpreter": interpreter}
    out = redact_record(out)  # credentials in URLs, secret flags' values: masked wherever they are
    from offload_lab.core.errors import InputError
    from offload_lab.fit import plan_formats

    from offload_lab.server import multinode

    multinode.check_ray_env(st.spec.pod, stack.server_env(st), list(server.env_from), str(args.file))
    out["plan_format"], plan_problems = plan_formats.stack_plan_report(st)
    if plan_problems:
        raise InputError(f"stack file {args.file}: the plan the offload part would get is not in the format it "
                         f"reads or does not cover the model:\n  " + "\n  ".join(plan_problems)
                         + f"\nrun `offload-lab stack install {args.file}` (it writes each plan as "
                           f"{out['plan_format']['format']}), or fix the file by hand")
    if args.json:
        _print_json(out)
        return 0
    print(f"stack file {args.file} is valid ({st.spec.name})")
    if out["plan_format"]:
        _print_plan_format(out["plan_format"])
    print("  server command: " + " ".join(out["command"]))
    for k, v in out["env"].items():
        print(f"  env {k}={'(unset)' if v is None else v}")
    for k in out["env_from"]:
        print(f"  env {k}=(from the environment: {'set' if k in os.environ else 'NOT SET here'})")
    if cpus_missing:
        print(f"  warning: server.cpus {cpus_missing} are not CPUs this machine lets us use "
              f"({sorted(os.sched_getaffinity(0))}); the server would start on the others only")
    if out["price"]:
        print(f"  price: {out['price']['per_hour']} {out['price']['currency']} an hour ({out['price']['source']})")
    if unpinned:
        print(f"  unpinned ({len(unpinned)}); `stack install` refuses without --allow-unpinned:")
        for u in unpinned:
            print(f"    - {u}")
    else:
        print("  every part, patch, download and plan is pinned")
    return 0


def _print_plan_format(info: dict[str, Any]) -> None:
    rb = info["read_by"]
    who = (f"read by {'patch ' + rb['patch'] + ' of ' if rb.get('patch') else ''}part {rb['part']}" if rb
           else "its reader not declared (plans.read_by)")
    known = ("" if info["reader_known"] or not rb
             else " (offload-lab does not know this reader: format taken as declared)")
    print(f"  plan format the offload part gets: {info['format']}, {who}, path in ${info['env']}{known}")
    if info.get("format_provenance"):
        print(f"    format from: {' '.join(info['format_provenance'].split())}")
    for name, row in info["files"].items():
        mark = " (boots with it)" if name == info["use"] else ""
        state = "present" if row["served_present"] else "not made yet (`stack install` makes it)"
        line = f"    {name}{mark}: {row['served_path']} [{state}]"
        if row["served_path"] != row["path"]:
            line += f", written from {row['path']}"
        if row.get("checked_against"):
            line += (f"; read as the offload part would, against {row['checked_against']}: {row['layers_found']} of "
                     f"{row['moe_layers']} MoE layers found, {row['host_experts']:,} host experts")
        print(line)


# --- boots -------------------------------------------------------------------------------------------------------

def cmd_boots_list(args: argparse.Namespace) -> int:
    from offload_lab.core import runs

    from offload_lab.core.errors import InputError
    from offload_lab.core.inputs import read_json

    base = runs.campaign_dir(Path(args.data_dir), args.campaign)
    rows = []
    for row in (runs.scan_runs(Path(args.data_dir), args.campaign, "boots") if (base / "boots").is_dir() else []):
        m, problem = row.manifest or {}, row.problem
        boot: dict[str, Any] = {}
        if (row.path / "boot.json").is_file():
            try:
                boot = read_json(row.path / "boot.json", "boot record", expect=dict)
            except InputError as e:
                problem = str(e)
        params = m.get("parameters") if isinstance(m.get("parameters"), dict) else {}
        outcome = runs.CORRUPT if problem else boot.get("outcome", row.status)
        if row.status == runs.ABANDONED:  # its serve process is gone and nobody stopped it
            outcome = f"{boot.get('outcome', 'booting')}, abandoned"
        rows.append({"run": row.path.name, "started_at": m.get("started_at"), "stack": params.get("stack"),
                     "variant": params.get("boot") or params.get("variant"), "outcome": outcome,
                     "expected": boot.get("expected"), "startup_s": boot.get("startup_s"),
                     "evidence": problem or boot.get("evidence"), "stopped": boot.get("stopped")})
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print(f"no boots under {Path(args.data_dir) / args.campaign}")
    for r in rows:
        expected = "" if r["expected"] is None else f" (expected {r['expected']})"
        print(f"{r['run']}  {r['stack'] or '-'}{'/' + r['variant'] if r['variant'] else ''}: {r['outcome']}"
              f"{expected}" + (f" after {r['startup_s']:.0f} s" if r["startup_s"] is not None else ""))
        if r["evidence"] and r["outcome"] != "ready":
            print(f"    {r['evidence'][:160]}")
        if r["stopped"]:
            print(f"    stopped: {r['stopped'].get('reason')}")
    return 2 if any(r["outcome"] == runs.CORRUPT for r in rows) else 0


# --- ledger ------------------------------------------------------------------------------------------------------

def cmd_campaign_ledger(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import ledger

    from offload_lab.core.errors import InputError

    sessions = ledger.read_ledger(Path(args.data_dir), args.campaign)
    # A line that parses but lacks what a session needs is damage, reported with a count, not a crash.
    damaged = [s.get("session") for s in sessions if not isinstance(s.get("started_at"), str)
               or (not s.get("open") and not isinstance(s.get("minutes"), (int, float)))]
    if damaged:
        raise InputError(f"ledger {ledger.ledger_path(Path(args.data_dir), args.campaign)}: {len(damaged)} session(s) "
                         f"with damaged lines (no start time or no minutes), e.g. {damaged[:3]}; restore the file "
                         "from the data's version control")
    tot = ledger.totals(sessions)
    if args.json:
        _print_json({"sessions": sessions, "totals": tot})
        return 0
    for s in sessions:
        pod = s.get("pod") or {}
        gpus = f"{pod.get('gpu_count')} x {pod['gpus'][0]}" if pod.get("gpus") else "no GPU"
        if s.get("open"):
            print(f"{s['session']}  {s['started_at']}  OPEN (no end recorded)  pod {pod.get('name') or '-'} ({gpus})")
            continue
        cost = "-" if s.get("cost") is None else f"{s['cost']:.2f} {s['currency']}"
        print(f"{s['session']}  {s['started_at']} -> {s['ended_at']}  {s['minutes']:.1f} min  {cost}  "
              f"{s['outcome']}  pod {pod.get('name') or '-'} ({gpus})")
    costs = ", ".join(f"{v:.2f} {k}" for k, v in tot["cost"].items()) or "no priced session"
    print(f"{tot['sessions']} session(s), {tot['open']} open; {tot['minutes']:.1f} minutes; {costs}")
    return 0


def add_parsers(sub: Any, campaign_sub: Any | None = None) -> None:
    """Register ``stack`` and ``boots`` on the top-level subparsers, and ``ledger`` under ``campaign``."""
    ssub = action_group(sub, "stack", "install or check a stack file (the server's environment, model and plan)",
                        "Stack files (configs/stacks/*.yaml) pin every part of a server: packages and "
                        "git commits, patches with their sha256 and receipts, model revisions, plans, "
                        "flags and environment.")
    pi = ssub.add_parser(
        "install", help="build a stack's environment on a pod: parts, patches (receipts checked), model, plans",
        description="Create the stack's virtual environment; install its PyPI parts at their versions; clone its git "
                    "parts at their commits, check each patch's sha256, apply it, and check the receipts (the "
                    "sha256 of every patched file after patching) against the stack file: a mismatch stops the "
                    "install. Then build the parts, download the model at its pinned revisions (a token only from "
                    "$HF_TOKEN) and make the plan files. Writes offload-lab-install.json into the environment; "
                    "every boot copies it into boot.json. Refuses a stack with unpinned items unless "
                    "--allow-unpinned. Exit status 2 for a refused or invalid stack, 4 for a failed step.")
    pi.add_argument("file", help="stack file, e.g. configs/stacks/study-pod.yaml")
    pi.add_argument("--dry-run", action="store_true",
                    help="print every command and check it would run, as a shell script, install nothing, and check "
                         "every file it would use: pins (full commits, exact versions, patch sha256 and receipts, "
                         "model revisions), patch and requirements files, and the plans, made into a scratch "
                         "directory and read back in the format the offload part reads; exit 2 on an error")
    pi.add_argument("--allow-unpinned", action="store_true",
                    help="install although parts are unpinned (short commits, no receipts); the install record "
                         "lists what was installed so the stack file can be pinned from it")
    pi.add_argument("--skip-preflight", action="store_true", help="skip the stack's preflight commands (nvidia-smi)")
    pi.add_argument("--skip-model", action="store_true", help="skip downloading the model (already in place)")
    pi.add_argument("--checkpoint", default=None,
                    help="with --dry-run: checkpoint (directory or synthetic spec YAML) to try the plan commands on "
                         "(default: the model if here, else plans.dry_run_checkpoint)")
    pi.add_argument("--no-checks", action="store_true",
                    help="with --dry-run: only print the script, without checking the files it would use")
    pi.set_defaults(func=cmd_stack_install)
    pk = ssub.add_parser("check", help="validate a stack file; print its server command, plan, price, unpinned items",
                         description="Load a stack file (following `extends`), validate it, and print the server "
                                     "command it starts, the environment variables it sets (the plan file's among "
                                     "them), the plan format its offload part gets (plans.format, read by "
                                     "plans.read_by), its price and every item that is not pinned. Exit 2, naming "
                                     "the file and what to do, when a plan file present is not in the format the "
                                     "offload part reads or does not cover the model, when plans.format is not one "
                                     "that part reads, or when plans.env is not the variable it reads.")
    pk.add_argument("file", help="stack file")
    finish_parser(pk, cmd_stack_check, json_help="print JSON (keys command, env, plan, plan_format, price, unpinned)")

    bsub = action_group(sub, "boots", "list a campaign's boots and how each ended",
                        "Boots are data: every server start is a run of experiment 'boots' with its "
                        "log and boot.json (outcome: ready, oom_load, oom_kv_cache, init_failure, exited, "
                        "timeout, died_first_request, probe_failed).")
    pbl = bsub.add_parser("list", help="one line per boot: stack, variant, outcome, expected outcome, startup time",
                          description="List the boots of a campaign with the log line that decided each failure.")
    pbl.add_argument("--campaign", required=True, help="campaign name (a directory under the data root)")
    finish_parser(pbl, cmd_boots_list, data_dir=True, json_help="print JSON")

    if campaign_sub is not None:
        pl = campaign_sub.add_parser(
            "ledger", help="the campaign's sessions: pod, start, end, minutes and cost at the stack's price",
            description="Read <data>/<campaign>/ledger.jsonl (append-only; one start and one end line per "
                        "`campaign run`) and print each session and the totals; a session without an end line is "
                        "shown as open and not counted.")
        pl.add_argument("campaign", help="campaign name, e.g. study-pod")
        finish_parser(pl, cmd_campaign_ledger, data_dir=True, json_help="print JSON (sessions and totals)")


__all__ = ["add_parsers"]
