"""``offload-lab pod plan|merge|ledger``: a campaign on rented pods through SkyPilot, their data merged back, and
what the launcher says they cost. Handlers and help texts live here so that ``cli/main.py`` only gains a call to
:func:`add_parsers`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from offload_lab.cli.common import action_group, int_at_least, print_json
from offload_lab.cli.common import DATA_DIR, DATA_DIR_HELP
from offload_lab.cli.pod_operator import (PLAN_FILE, cmd_pod_down, cmd_pod_logs, cmd_pod_status, load_plan_dir,
                                          read_plan, say)
from offload_lab.core.errors import InputError



def _load(campaign_file: str, stack_file: str | None) -> tuple[Any, Any, Path]:
    from offload_lab.campaigns import runner
    from offload_lab.server import stack as stackmod

    campaign = runner.load_campaign(campaign_file)
    stack_path = Path(stack_file) if stack_file else campaign.stack_path(None)
    if stack_path is None:
        raise InputError(f"campaign file {campaign_file} names no stack; give --stack")
    st = stackmod.load_stack(stack_path, root=campaign.root)
    return campaign, st, stack_path


def _make_plan(args: argparse.Namespace) -> dict[str, Any]:
    """The plan of `pod plan` and `pod launch`: every task built before its folder is made, and the folder removed
    again when the check refuses, so a refused plan leaves nothing behind. Returns plan.json's record, the folder
    and the objects the launcher needs."""
    from offload_lab.campaigns import runner
    from offload_lab.core import places
    from offload_lab.core.inputs import check_out
    from offload_lab.pods import plan as planmod
    from offload_lab.pods import skypilot as sp
    from offload_lab.server import stack as stackmod

    campaign, st, stack_path = _load(args.campaign, args.stack)
    runner.validate(campaign)  # a campaign that would fail on the pod fails here, before anything is rented
    pod = sp.pod_of(st.spec, str(stack_path))
    from offload_lab.server import multinode

    # a second node without the plan's variable is refused here, before anything is rented
    multinode.check_ray_env(pod, stackmod.server_env(st), list(st.spec.server.env_from), str(stack_path))
    only = [x for x in args.only.split(",") if x] if args.only else None
    plan = planmod.plan_pods(campaign, stack_path, pods=args.pods, split=args.split, plan_id=args.plan_id, only=only)
    opts = sp.TaskOptions(git_url=args.git_url, git_ref=args.git_ref, bucket=args.bucket, store=args.store,
                          allow_unpinned=args.allow_unpinned, secrets=sp.secrets_for(campaign, st.spec, only))
    out = Path(args.out) if args.out else campaign.root / "_output" / "pods" / plan.plan_id
    data_dir = getattr(args, "data_dir", None)  # `pod launch` merges into it: the plan's folder stays out of it
    if data_dir is not None:
        places.check_output(data_dir, "--data-dir", "dir")
    places.check_output(out, "--out", "dir", outside={"the data tree": data_dir})
    check_out(out, args.force, "--out", kind="dir")
    dicts = {part.cluster: sp.task_dict(plan, part, st.spec, campaign, opts) for part in plan.parts}
    stacks = {part.cluster: sp.stacks_for(plan, part, st.spec, campaign, opts) for part in plan.parts}
    for cluster, task in dicts.items():
        missing = sp.missing_installs(task, stacks[cluster])
        if missing:  # the task is the plan's own making; this guards the run against a setup that drifted from it
            raise InputError(f"pod {cluster} would boot {', '.join(missing)}, which its setup does not install")
    tasks = {f"{cluster}.yaml": sp.task_yaml(task) for cluster, task in dicts.items()}
    made = not out.exists()
    written: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in tasks.items():
            (out / name).write_text(text, encoding="utf-8")
            written.append(out / name)
        shown = str(out.relative_to(Path.cwd())) if out.resolve().is_relative_to(Path.cwd()) else str(out)
        record: dict[str, Any] = {"plan": plan.model_dump(), "options": opts.model_dump(),
                                  "checkout": str(campaign.root),  # what the tasks sync: a relaunch syncs it again
                                  "stack_price": st.spec.price.model_dump() if st.spec.price else None,
                                  "pod": pod.model_dump(),
                                  "stacks": stacks,  # per pod: every stack its setup installs, the planned first
                                  "commands": sp.commands(plan, shown, opts, pod.autodown_idle_minutes,
                                                          spot=pod.use_spot),
                                  "tasks": [p.name for p in written]}
        if args.check:
            from offload_lab.pods import catalog

            offers = catalog.check(pod, str(stack_path))  # offline, before SkyPilot's parser: refused here
            record["placement"] = {c: None if o is None else {**o.__dict__, "total_per_hour": o.total}
                                   for c, o in offers.items()}
            checked = sp.check_tasks(written, sp.sky_python(args.sky_python, campaign.root))
            record["skypilot"] = {"version": checked[0]["sky_version"], "tasks": len(checked)}
        (out / PLAN_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    except BaseException:
        for f in written:
            f.unlink(missing_ok=True)
        if made:
            shutil.rmtree(out, ignore_errors=True)  # made a moment ago, by us: a refused plan leaves no folder
        raise
    return {"record": record, "out": out, "shown": shown, "plan": plan, "pod": pod, "campaign": campaign,
            "stack": st, "opts": opts}


def cmd_pod_plan(args: argparse.Namespace) -> int:
    made = _make_plan(args)
    record, plan, pod, shown = made["record"], made["plan"], made["pod"], made["shown"]
    if args.json:
        print_json({**record, "out": str(made["out"]),
                    "task_files": [str(made["out"] / t) for t in record["tasks"]]})
        return 0
    print(f"{len(record['tasks'])} SkyPilot task(s) for campaign {plan.campaign} ({plan.split}) in {shown}/")
    for part in plan.parts:
        what = ("the whole campaign" if not part.only else "--only " + ",".join(part.only)) + (
            f", {part.repeat_boots} boot(s)" if part.repeat_boots else "")
        print(f"  {part.cluster}: {pod.nodes} x {pod.accelerator}:{pod.count}, {what}; installs "
              + ", ".join(record["stacks"][part.cluster]))
    if record.get("skypilot"):
        print(f"  every task loads with SkyPilot {record['skypilot']['version']}'s parser")
    if "placement" in record:
        if not record["placement"]:
            print(f"  placement: {pod.count} x {pod.accelerator} is not in the catalog snapshot "
                  "(resources/skypilot_catalog): SkyPilot's optimizer places it at launch")
        for cloud, o in record["placement"].items():
            if o is None:
                print(f"  placement on {cloud}: no instance meets the request")
                continue
            print(f"  placement on {cloud}: {o['instance']} ({o['region']}, {o['vcpus']:g} vCPUs, "
                  f"{o['memory_gib']:g} GiB), {o['price']:.2f} USD an hour a node"
                  + (f", {o['total_per_hour']:.2f} for {o['nodes']} nodes" if o["nodes"] > 1 else "")
                  + f", each of the {len(plan.parts)} pod(s); SkyPilot's catalog price, not the invoice")
    for step, lines in record["commands"].items():
        if lines:
            print(f"{step}:")
            for line in lines:
                print(f"  {line}")
    return 0


def cmd_pod_launch(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner
    from offload_lab.core import paths
    from offload_lab.pods import bill
    from offload_lab.pods import launch as launchmod
    from offload_lab.pods import merge as mergemod
    from offload_lab.pods import skypilot as sp

    target = Path(args.campaign)
    if (target / PLAN_FILE).is_file():  # a plan launched before: launch what its pods have not sent back yet
        plan_dir = target
        record, plan, campaign, st, opts = load_plan_dir(plan_dir)
        resumed = True
    else:
        made = _make_plan(args)
        plan_dir, record, plan, campaign, st, opts = (made["out"], made["record"], made["plan"], made["campaign"],
                                                      made["stack"], made["opts"])
        resumed = False
    if sp.pod_of(st.spec, plan.stack_file).use_spot and not opts.bucket:
        raise InputError(f"stack file {plan.stack_file} rents spot pods (pod.use_spot): they run as SkyPilot managed "
                         "jobs, recovered on a new pod when preempted, and their runs come home through a bucket; "
                         "give --bucket NAME")
    if not (sp.pod_of(st.spec, plan.stack_file).use_spot and opts.bucket) and shutil.which("rsync") is None:
        raise InputError("rsync is not installed here: `pod launch` brings each pod's runs home with rsync over the "
                         "ssh entry SkyPilot writes (apt-get install rsync, brew install rsync)")
    missing = [s for s in opts.secrets if not os.environ.get(s)]
    if missing:
        raise InputError(f"the tasks pass {', '.join(missing)} to the pods and it is not set here: export it (its "
                         "value goes to SkyPilot at launch, never into a file)")
    adapter = launchmod.Adapter(sp.sky_python(args.sky_python, campaign.root))
    launcher = launchmod.PodLauncher(plan_dir, plan, campaign, st.spec, opts, adapter, log=say,
                                     relaunches=args.relaunches, keep_up=args.keep_up, max_cost=args.max_cost)
    # a resumed plan asks SkyPilot first: a cluster still up is re-attached to (its finished runs fetched, its
    # running job followed), never launched over (SkyPilot would reuse it: setup again, a second job)
    todo = (launchmod.next_launches(plan_dir, campaign, plan, launcher.live()) if resumed
            else [(p, p, 0, None) for p in plan.parts])
    attached = sum(1 for *_, a in todo if a is not None)
    print(f"plan {plan.plan_id}: {len(todo) - attached} pod(s) to launch, {attached} to re-attach to, for campaign "
          f"{plan.campaign} ({plan_dir})", flush=True)
    report = launcher.run(todo) if todo else launchmod.LaunchReport([], [])
    clusters = [p.cluster for p in plan.parts]
    sources = [r for c in clusters for r in launchmod.fetched_roots(plan_dir, c) if (r / plan.campaign).is_dir()]
    pod_lines = bill.pod_lines(report.cost_report, plan_dir, plan, record.get("stack_price"),
                               record.get("pod") or {}) if todo else []
    data = Path(args.data_dir)
    rep = mergemod.merge(sources, data, plan.campaign, pod_lines) if sources else mergemod.MergeReport()
    for line in bill.close_lost_sessions(data, plan.campaign, pod_lines) if sources else []:
        print(f"  session {line['session']} closed at its pod's end ({line['minutes']:.1f} min): its pod was lost")
    print(f"merged {len(sources)} launch(es)' data into {data / plan.campaign}: {len(rep.copied)} run(s) copied, "
          f"{len(rep.skipped)} already there; {len(pod_lines)} launch(es) priced in the ledger "
          f"(`offload-lab pod ledger {plan.campaign} --data-dir {data}`)")
    up = report.left_up()
    for ln in up:
        print(f"  {ln.cluster}: LEFT UP, its data is not home: {ln.left_up}")
    left = [x for x in launchmod.next_launches(plan_dir, campaign, plan) if x[0].cluster not in
            {ln.cluster for ln in up}] + [(ln.part, ln.part, ln.number, None) for ln in up]
    for part, what, _, _ in left:
        if part.cluster not in {ln.cluster for ln in up}:
            print(f"  {part.cluster}: not finished, left: {','.join(what.only or ['the whole campaign'])}; "
                  f"`offload-lab pod launch {plan_dir}` launches it again")
    if plan.after_merge and not left and not args.no_analysis:
        from offload_lab.campaigns.progress import Progress

        print(f"after the merge, over every pod's data, here: {', '.join(plan.after_merge)}", flush=True)
        with Progress("quiet", campaign=plan.campaign, experiments=len(plan.after_merge)) as progress:
            runner.run_campaign(campaign, data_root=data, only=list(plan.after_merge), progress=progress)
    if args.paper and not left:
        from offload_lab.paper import build as paper

        # the paper of this checkout over the merged data, kept with the plan that made it
        built = paper.build_paper(campaign=plan.campaign, data_root=data, out_dir=plan_dir / "paper",
                                  repo_root=paths.find_root())
        print(f"paper: {built.pdf or built.html}")
    failed = [ln for ln in report.launches if ln.outcome == "failed"]
    return 4 if left or failed else 0


def cmd_pod_merge(args: argparse.Namespace) -> int:
    from offload_lab.pods import merge as mergemod

    from offload_lab.pods.launch import fetched_roots

    plan_dir = Path(args.plan_dir)
    record = read_plan(plan_dir)
    campaign = record["plan"]["campaign"]
    clusters = [p["cluster"] for p in record["plan"]["parts"]]
    # every launch of each cluster: <cluster>/data, then a relaunch's <cluster>-r1/data ...
    sources = [r for c in clusters for r in fetched_roots(plan_dir, c) if (r / campaign).is_dir()]
    missing = [c for c in clusters if not any((r / campaign).is_dir() for r in fetched_roots(plan_dir, c))]
    if missing and not args.partial:
        raise InputError(f"no data fetched yet for {', '.join(missing)} (expected {plan_dir}/<cluster>/data/"
                         f"{campaign}/: run the fetch commands of plan.json), or give --partial to merge the rest")
    pod_lines = None
    if args.cost_report:
        try:
            report = json.loads(Path(args.cost_report).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"--cost-report {args.cost_report}: cannot read it as JSON ({e}); write it with "
                             "`sky cost-report -o json --days 0 > FILE`") from e
        from offload_lab.pods import bill
        from offload_lab.pods.plan import PodPlan

        pod_lines = bill.pod_lines(report, plan_dir, PodPlan.model_validate(record["plan"]), record.get("stack_price"),
                                   record.get("pod") or {})
    rep = mergemod.merge(sources, Path(args.data_dir), campaign, pod_lines)
    if pod_lines:
        bill.close_lost_sessions(Path(args.data_dir), campaign, pod_lines)
    if args.json:
        print_json({"campaign": campaign, "sources": [str(s) for s in sources], **rep.to_dict(),
                    "pods": pod_lines})
        return 0
    print(f"merged {len(sources)} pod(s) into {Path(args.data_dir) / campaign}: {len(rep.copied)} run(s) copied, "
          f"{len(rep.skipped)} already there, {rep.ledger_lines} ledger line(s) appended")
    for u in rep.unfinished:
        print(f"  unfinished (still marked running; its pod stopped mid-run): {u}")
    for line in pod_lines or []:
        print(f"  pod {line['cluster']}: {_pod_text(line)}")
    after = record.get("commands", {}).get("after_merge") or []
    if after:
        print("now, over every pod's data: " + " && ".join(after))
    return 0


def _pod_text(p: dict[str, Any]) -> str:
    cost = "no cost" if p.get("cost") is None else f"{p['cost']:.2f} {p['currency']}"
    state = "OPEN (still up)" if p.get("open") else "not listed by the launcher" if p.get("open") is None else \
        f"{p.get('started_at')} -> {p.get('ended_at')}"
    minutes = "" if p.get("minutes") is None else f"{p['minutes']:.1f} min, "
    return f"{state}, {minutes}{cost} (price from {p.get('source')})"


def cmd_pod_ledger(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import ledger

    pods = ledger.read_pods(Path(args.data_dir), args.campaign)
    tot = ledger.pod_totals(pods)
    if args.json:
        print_json({"pods": pods, "totals": tot})
        return 0
    if not pods:
        print(f"campaign {args.campaign} has no launcher records (`offload-lab pod merge ... --cost-report` adds "
              "them); `offload-lab campaign ledger` shows its sessions")
        return 0
    for p in pods:
        launch = f" (launch {p['launch']})" if p.get("launch") not in (None, "None") else ""
        print(f"{p['cluster']}{launch}  {_pod_text(p)}  sessions: {', '.join(p['sessions']) or '-'}")
    costs = "; ".join(f"{src}: " + ", ".join(f"{v:.2f} {c}" for c, v in by.items())
                      for src, by in tot["cost_by_source"].items()) or "no priced pod"
    print(f"{tot['pods']} pod(s), {tot['open']} open, {tot['unlisted']} not listed; {tot['minutes']:.1f} paid "
          f"minutes; {costs}")
    return 0


# Each subcommand's arguments as a table: (name or flag, add_argument's keywords).
_DATA_DIR = ("--data-dir", dict(default=DATA_DIR, help=DATA_DIR_HELP))
_JSON = ("--json", dict(action="store_true", help="print JSON"))
_PLAN_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("campaign", dict(help="campaign file, e.g. configs/campaigns/study-pod.yaml")),
    ("--stack", dict(default=None, help="stack file whose `pod:` to rent (default: the campaign's)")),
    ("--pods", dict(type=int_at_least(1, 64), default=1, help="pods to spread the campaign over (default 1)")),
    ("--split", dict(default="auto", choices=["auto", "none", "experiments", "repeat_boots"],
                     help="what to spread (default auto: repeat boots if the campaign has them, else experiments)")),
    ("--only", dict(default=None, help="a named part: only these experiments (comma-separated; 'boots' for the boot "
                                       "attempts), as `campaign run --only`")),
    ("--out", dict(default=None, help="folder for the tasks (default _output/pods/<plan id>)")),
    ("--plan-id", dict(default=None, help="names the plan and its clusters: 1-8 lower-case letters or digits "
                                          "(default: 4 random hex)")),
    ("--force", dict(action="store_true", help="write into a --out folder that is not empty")),
    ("--bucket", dict(default=None, help="copy each pod's data to this bucket (survives --down)")),
    ("--store", dict(default="s3", choices=["s3", "gcs", "r2", "azure", "oci"], help="bucket kind")),
    ("--git-url", dict(default=None, help="clone this repository on the pod instead of syncing the checkout")),
    ("--git-ref", dict(default=None, help="with --git-url: the commit (manifests then show a clean tree)")),
    ("--allow-unpinned", dict(action="store_true",
                              help="plan for a stack with unpinned items (its `stack install` gets --allow-unpinned)")),
    ("--check", dict(action="store_true",
                     help="place each pod from the snapshot of SkyPilot's catalog (cloud, instance, price; a request "
                          "no instance meets is refused) and load every task with SkyPilot's own parser (offline; "
                          "needs SkyPilot: make sky-env)")),
    ("--sky-python", dict(default=None, help="interpreter with skypilot (default $OFFLOAD_LAB_SKY_PYTHON, else "
                                             ".venvs/sky/bin/python)")),
    _JSON,
]
_LAUNCH_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("campaign", dict(help="campaign file (a new plan, as `pod plan` makes it), or the folder of a plan launched "
                           "before (launches what its pods have not sent back yet)")),
    *[a for a in _PLAN_ARGS if a[0] not in ("campaign", "--json")],
    _DATA_DIR,
    ("--relaunches", dict(type=int_at_least(0, 10), default=2,
                          help="launch a lost pod (preempted, gone) again this many times for what it has left "
                               "(default 2)")),
    ("--keep-up", dict(action="store_true", help="leave the pods up when their job ends (default: take them down)")),
    ("--max-cost", dict(type=float, default=None,
                        help="stop when the launches of this run have cost this much (SkyPilot's prices, USD): "
                             "nothing more is launched, and what it launched is taken down once its data is "
                             "home")),
    ("--no-analysis", dict(action="store_true",
                           help="do not run the experiments that need no server after the merge")),
    ("--paper", dict(action="store_true", help="build the paper from the merged data at the end, into <plan>/paper/")),
]
_MERGE_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("plan_dir", dict(help="the folder `pod plan` (or `pod launch`) wrote: plan.json, <cluster>/data/ and a "
                          "relaunch's <cluster>-r1/data/")),
    _DATA_DIR,
    ("--cost-report", dict(default=None, help="`sky cost-report -o json --days 0` saved to a file")),
    ("--partial", dict(action="store_true", help="merge the pods fetched so far")),
    _JSON,
]
_LEDGER_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("campaign", dict(help="campaign name, e.g. study-pod")), _DATA_DIR, _JSON]

_SKY_PY = ("--sky-python", dict(default=None, help="interpreter with skypilot (default $OFFLOAD_LAB_SKY_PYTHON, "
                                                   "else .venvs/sky/bin/python)"))
_PLANS = ("--plans", dict(default="_output/pods", help="where to look for the plan of a cluster named alone "
                                                      "(default _output/pods, where `pod plan` writes)"))
_STATUS_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("plan_dir", dict(help="the folder `pod plan` or `pod launch` wrote")), _SKY_PY, _JSON]
_LOGS_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("target", dict(help="a cluster of a plan (e.g. ol-study-pod-ab12-0)")),
    ("--plan", dict(default=None, help="the plan folder the cluster was launched from")),
    ("--follow", dict(action="store_true", help="follow the log until the job ends")), _PLANS, _SKY_PY]
_DOWN_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("target", dict(help="a plan folder (every pod of it) or one of its clusters")),
    ("--force", dict(action="store_true", help="take it down even when its job runs or its data cannot be fetched "
                                               "(what is not home is lost)")), _PLANS, _SKY_PY]

_SUBCOMMANDS = [
    ("plan", cmd_pod_plan, _PLAN_ARGS,
     "write SkyPilot task YAML for a campaign (one per pod) and print the commands",
     "Resources come from the stack file's `pod:` section (accelerator, GPUs per node, nodes, disk); setup runs the "
     "README's install and `stack install`; run checks `nvidia-smi topo -m`, then runs the campaign or its part. "
     "--pods N spreads the experiments (or, for a campaign with repeat_boots, the boots) over N pods. Writes "
     "<out>/<cluster>.yaml and <out>/plan.json. Exit status 2 for a stack a launcher cannot express, a split the "
     "campaign cannot take, or a refused check."),
    ("launch", cmd_pod_launch, _LAUNCH_ARGS,
     "launch a campaign's pods through SkyPilot, follow them, bring each run home, take them down, merge",
     "Plan as `pod plan` does (or take the folder of a plan launched before), then through SkyPilot's Python API "
     "(run with SkyPilot's interpreter, --sky-python): launch every pod (a managed job when the stack rents spot), "
     "show each pod's progress (the campaign's own lines, named by cluster), fetch each run into <plan>/<cluster>/"
     "data/ as it finishes (retried), launch a pod lost mid-campaign again with only what its data lacks (same cluster "
     "name, --relaunches), take each pod down once its data is home (one whose data cannot be fetched is left up and "
     "named), record every launch's cost (`sky cost-report`) in the ledger, merge the "
     "data into --data-dir, run the analysis that needs no server here, and with --paper build the paper. The "
     "secrets the tasks pass must be set here. Exit 2 for a bad plan or a missing secret, 3 when SkyPilot refuses "
     "a call, 4 when a pod did not finish its part (run the same command on the plan folder again) or an "
     "experiment failed. Given a plan folder, it re-attaches to the pods still up before launching anything. "
     "Tested against a recorder standing in for SkyPilot; no cloud has run it yet."),
    ("merge", cmd_pod_merge, _MERGE_ARGS,
     "merge the pods' fetched data into one campaign; record what the launcher says they cost",
     "Check every run of every pod against its manifest, refuse run ids seen twice, then copy the runs and the "
     "pods' ledger lines into --data-dir. With --cost-report (`sky cost-report -o json --days 0`), one `pod` ledger "
     "line per launch of each cluster (a relaunched name is paid again): start, end, minutes, price and cost, from "
     "the launcher where it gives them and from the "
     "stack file's price where it does not (`source`)."),
    ("status", cmd_pod_status, _STATUS_ARGS,
     "each pod of a plan: up or gone, its job, what is home, what is left, and the cost so far",
     "Asks SkyPilot (status refreshed from the cloud, each cluster's job queue, or the managed jobs' queue) and "
     "reads the plan folder: per pod its state and job, its launches, the experiments with an ok run at home, what "
     "is left to run, why it was left up, and the minutes and cost so far from `sky cost-report` (SkyPilot's catalog "
     "prices, not the invoice). Starts nothing."),
    ("logs", cmd_pod_logs, _LOGS_ARGS,
     "a pod's job log (sky logs / sky jobs logs), so far or followed",
     "The log of the latest job the launcher started on the cluster, as SkyPilot keeps it."),
    ("down", cmd_pod_down, _DOWN_ARGS,
     "take a plan's pods (or one) down, each only after a last fetch brought its data home",
     "For each pod still up: refuse while its job runs; fetch its data into the plan folder (retried); take it "
     "down only when that worked. --force takes it down anyway. Exit 3 when a pod was kept up."),
    ("ledger", cmd_pod_ledger, _LEDGER_ARGS,
     "the campaign's pods as the launcher reported them, with the price source",
     "Read the `pod` lines of <data>/<campaign>/ledger.jsonl: per launch of each cluster the paid minutes (launch to "
     "teardown, "
     "setup included), cost, where the price came from (launcher or stack_file) and the sessions it ran."),
]


def add_parsers(sub: Any) -> None:
    """Register ``pod plan|launch|status|logs|down|merge|ledger``."""
    psub = action_group(sub, "pod", "run a campaign on rented pods through SkyPilot; merge their data back",
                        "From a laptop with SkyPilot configured (docs/runbook.md): write one SkyPilot "
                        "task per pod, print the commands that launch them, bring their data back and "
                        "take them down, then merge every pod's runs into one campaign.")
    for name, func, table, help_text, description in _SUBCOMMANDS:
        p = psub.add_parser(name, help=help_text, description=description)
        for flag, kwargs in table:
            p.add_argument(flag, **kwargs)
        p.set_defaults(func=func)


__all__ = ["add_parsers"]
