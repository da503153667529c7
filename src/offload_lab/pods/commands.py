"""What the command line asks of pods: the parameters of ``pod plan|launch|merge|status|logs|down|ledger`` (their
flags come from these models through ``cli/model_options.py``) and the work behind them (reading a plan folder,
making a plan, launching it, its pods' state, taking them down, merging their data), tested without the command
line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from offload_lab.core import paths
from offload_lab.core.commands import CAMPAIGN_HELP, Params, data_dir_field
from offload_lab.core.errors import InputError

PLAN_FILE = "plan.json"
PLANS_DIR = "_output/pods"  # where `pod plan` writes, under the checkout
SKY_PYTHON_HELP = "python with SkyPilot (default $OFFLOAD_LAB_SKY_PYTHON, else .venvs/sky/bin/python)"


def say(line: str) -> None:
    print(line, flush=True)


class PodPlanParams(Params):
    campaign_file: str = Field(description="campaign file, e.g. configs/campaigns/study-pod.yaml")
    stack: str | None = Field(None, description="stack file whose `pod:` to rent (default: the campaign's)")
    pods: int = Field(1, ge=1, le=64, description="pods to spread the campaign over")
    split: Literal["auto", "none", "experiments", "repeat_boots"] = Field(
        "auto", description="what to spread (auto: repeat boots if the campaign has them, else experiments)")
    only: str | None = Field(None, description="a named part: only these experiments (comma-separated; 'boots' for "
                                               "the boot attempts), as `campaign run --only`")
    out: str | None = Field(None, description="folder for the tasks (default _output/pods/<plan id>)")
    plan_id: str | None = Field(None, description="names the plan and its clusters: 1-8 lower-case letters or digits "
                                                  "(default: 4 random hex)")
    force: bool = Field(False, description="write into a --out folder that is not empty")
    bucket: str | None = Field(None, description="copy each pod's data to this bucket (survives --down)")
    store: Literal["s3", "gcs", "r2", "azure", "oci"] = Field("s3", description="bucket kind")
    git_url: str | None = Field(None, description="clone this repository on the pod instead of syncing the checkout")
    git_ref: str | None = Field(None, description="with --git-url: the commit (manifests then show a clean tree)")
    allow_unpinned: bool = Field(False, description="plan for a stack with unpinned items")
    check: bool = Field(False, description="place each pod from SkyPilot's catalog snapshot and load every task "
                                           "with SkyPilot's parser (offline)")
    sky_python: str | None = Field(None, description=SKY_PYTHON_HELP)


class PodLaunchParams(PodPlanParams):
    campaign_file: str = Field(description="campaign file (a new plan), or a plan folder launched before")
    data_dir: str = data_dir_field()
    relaunches: int = Field(2, ge=0, le=10, description="times a lost pod is launched again for what it has left")
    keep_up: bool = Field(False, description="leave the pods up when their job ends (default: take them down)")
    max_cost: float | None = Field(None, gt=0, description="stop launching at this cost in USD (SkyPilot's prices); "
                                                           "what is up goes down once home")
    no_analysis: bool = Field(False, description="do not run the experiments that need no server after the merge")
    paper: bool = Field(False, description="build the paper from the merged data at the end, into <plan>/paper/")


class PodMergeParams(Params):
    plan_dir: str = Field(description="the folder `pod plan` (or `pod launch`) wrote: plan.json and <cluster>/data/")
    data_dir: str = data_dir_field()
    cost_report: str | None = Field(None, description="`sky cost-report -o json --days 0` saved to a file")
    partial: bool = Field(False, description="merge the pods fetched so far")


class PodStatusParams(Params):
    plan_dir: str = Field(description="the folder `pod plan` or `pod launch` wrote")
    sky_python: str | None = Field(None, description=SKY_PYTHON_HELP)


class PodTargetParams(Params):
    plans: str = Field(PLANS_DIR, description="where to look for the plan of a cluster named alone")
    sky_python: str | None = Field(None, description=SKY_PYTHON_HELP)


class PodLogsParams(PodTargetParams):
    target: str = Field(description="a cluster of a plan (e.g. ol-study-pod-ab12-0)")
    plan: str | None = Field(None, description="the plan folder the cluster was launched from")
    follow: bool = Field(False, description="follow the log until the job ends")


class PodDownParams(PodTargetParams):
    target: str = Field(description="a plan folder (every pod of it) or one of its clusters")
    force: bool = Field(False, description="take it down even when its job runs or its data cannot be fetched "
                                           "(what is not home is lost)")


class PodLedgerParams(Params):
    campaign: str = Field(description=CAMPAIGN_HELP)
    data_dir: str = data_dir_field()


# --- a plan folder -----------------------------------------------------------------------------------------------

def read_plan(plan_dir: Path) -> dict[str, Any]:
    p = plan_dir / PLAN_FILE
    if not p.is_file():
        raise InputError(f"{plan_dir} has no {PLAN_FILE}: give the folder `offload-lab pod plan` wrote")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{p} is not valid JSON ({e}); write the plan again with `offload-lab pod plan`") from e


def load_plan_dir(plan_dir: Path) -> tuple[dict[str, Any], Any, Any, Any, Any]:
    """plan.json's record, the plan, its campaign, its stack and task options, from the checkout it was made in."""
    from offload_lab.campaigns import runner
    from offload_lab.pods import plan as planmod
    from offload_lab.pods import skypilot as sp
    from offload_lab.server import stack as stackmod

    record = read_plan(plan_dir)
    root = Path(record["checkout"]) if paths.is_root(Path(record.get("checkout") or "")) else paths.find_root()
    plan = planmod.PodPlan.model_validate(record["plan"])
    campaign = runner.load_campaign(root / plan.campaign_file, root=root)
    st = stackmod.load_stack(root / plan.stack_file, root=root)
    opts = sp.TaskOptions.model_validate(record.get("options") or {})
    return record, plan, campaign, st, opts


def operator(plan_dir: Path, sky_python: str | None) -> tuple[dict[str, Any], Any, Any]:
    """plan.json's record, the plan and a launcher on it (for status, logs, down)."""
    from offload_lab.pods import launch as launchmod
    from offload_lab.pods import skypilot as sp

    record, plan, campaign, st, opts = load_plan_dir(plan_dir)
    adapter = launchmod.Adapter(sp.sky_python(sky_python, campaign.root))
    return record, plan, launchmod.PodLauncher(plan_dir, plan, campaign, st.spec, opts, adapter, log=say)


def find_plan(target: str, plans_root: Path) -> tuple[Path, str | None]:
    """(plan folder, cluster or None) for `pod down|logs TARGET`: a plan folder, or a cluster name of a plan under
    ``plans_root`` (the default place `pod plan` writes to)."""
    t = Path(target)
    if (t / PLAN_FILE).is_file():
        return t, None
    for p in sorted(plans_root.glob(f"*/{PLAN_FILE}")) if plans_root.is_dir() else []:
        try:
            clusters = [x["cluster"] for x in json.loads(p.read_text(encoding="utf-8"))["plan"]["parts"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if target in clusters:
            return p.parent, target
    raise InputError(f"{target} is neither a plan folder (with {PLAN_FILE}) nor a cluster of a plan under "
                     f"{plans_root}; give the plan folder (--plan DIR) the cluster was launched from")


# --- plan --------------------------------------------------------------------------------------------------------

def make_plan(p: PodPlanParams, data_dir: str | None = None) -> dict[str, Any]:
    """The plan of `pod plan` and `pod launch`: every task built before its folder is made, and the folder removed
    again when the check refuses, so a refused plan leaves nothing behind. Returns plan.json's record, the folder
    and the objects the launcher needs."""
    from offload_lab.campaigns import runner
    from offload_lab.core import places
    from offload_lab.core.inputs import check_out
    from offload_lab.pods import plan as planmod
    from offload_lab.pods import skypilot as sp
    from offload_lab.server import multinode
    from offload_lab.server import stack as stackmod

    campaign = runner.load_campaign(p.campaign_file)
    stack_path = Path(p.stack) if p.stack else campaign.stack_path(None)
    if stack_path is None:
        raise InputError(f"campaign file {p.campaign_file} names no stack; give --stack")
    st = stackmod.load_stack(stack_path, root=campaign.root)
    runner.validate(campaign)  # a campaign that would fail on the pod fails here, before anything is rented
    pod = sp.pod_of(st.spec, str(stack_path))
    # a second node without the plan's variable is refused here, before anything is rented
    multinode.check_ray_env(pod, stackmod.server_env(st), list(st.spec.server.env_from), str(stack_path))
    only = [x for x in p.only.split(",") if x] if p.only else None
    plan = planmod.plan_pods(campaign, stack_path, pods=p.pods, split=p.split, plan_id=p.plan_id, only=only)
    opts = sp.TaskOptions(git_url=p.git_url, git_ref=p.git_ref, bucket=p.bucket, store=p.store,
                          allow_unpinned=p.allow_unpinned, secrets=sp.secrets_for(campaign, st.spec, only))
    out = Path(p.out) if p.out else campaign.root / PLANS_DIR / plan.plan_id
    if data_dir is not None:  # `pod launch` merges into it: the plan's folder stays out of it
        places.check_output(data_dir, "--data-dir", "dir")
    places.check_output(out, "--out", "dir", outside={"the data tree": data_dir})
    check_out(out, p.force, "--out", kind="dir")
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
                                  "tasks": [f.name for f in written]}
        if p.check:
            from offload_lab.pods import catalog

            offers = catalog.check(pod, str(stack_path))  # offline, before SkyPilot's parser: refused here
            record["placement"] = {c: None if o is None else {**o.__dict__, "total_per_hour": o.total}
                                   for c, o in offers.items()}
            checked = sp.check_tasks(written, sp.sky_python(p.sky_python, campaign.root))
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


# --- launch ------------------------------------------------------------------------------------------------------

def launch(p: PodLaunchParams, log: Callable[[str], None] = say) -> int:
    """Plan (or take a plan folder launched before), launch, follow, fetch, merge, analyse, build the paper; the
    exit status: 4 when a pod did not finish its part or a launch failed, else 0."""
    from offload_lab.campaigns import runner
    from offload_lab.pods import bill
    from offload_lab.pods import launch as launchmod
    from offload_lab.pods import merge as mergemod
    from offload_lab.pods import skypilot as sp

    target = Path(p.campaign_file)
    if (target / PLAN_FILE).is_file():  # a plan launched before: launch what its pods have not sent back yet
        plan_dir = target
        record, plan, campaign, st, opts = load_plan_dir(plan_dir)
        resumed = True
    else:
        made = make_plan(p, data_dir=p.data_dir)
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
    adapter = launchmod.Adapter(sp.sky_python(p.sky_python, campaign.root))
    launcher = launchmod.PodLauncher(plan_dir, plan, campaign, st.spec, opts, adapter, log=log,
                                     relaunches=p.relaunches, keep_up=p.keep_up, max_cost=p.max_cost)
    # a resumed plan asks SkyPilot first: a cluster still up is re-attached to (its finished runs fetched, its
    # running job followed), never launched over (SkyPilot would reuse it: setup again, a second job)
    todo = (launchmod.next_launches(plan_dir, campaign, plan, launcher.live()) if resumed
            else [(part, part, 0, None) for part in plan.parts])
    attached = sum(1 for *_, a in todo if a is not None)
    log(f"plan {plan.plan_id}: {len(todo) - attached} pod(s) to launch, {attached} to re-attach to, for campaign "
        f"{plan.campaign} ({plan_dir})")
    report = launcher.run(todo) if todo else launchmod.LaunchReport([], [])
    sources = [r for part in plan.parts for r in launchmod.fetched_roots(plan_dir, part.cluster)
               if (r / plan.campaign).is_dir()]
    pod_lines = bill.pod_lines(report.cost_report, plan_dir, plan, record.get("stack_price"),
                               record.get("pod") or {}) if todo else []
    data = Path(p.data_dir)
    rep = mergemod.merge(sources, data, plan.campaign, pod_lines) if sources else mergemod.MergeReport()
    for line in bill.close_lost_sessions(data, plan.campaign, pod_lines) if sources else []:
        log(f"  session {line['session']} closed at its pod's end ({line['minutes']:.1f} min): its pod was lost")
    log(f"merged {len(sources)} launch(es)' data into {data / plan.campaign}: {len(rep.copied)} run(s) copied, "
        f"{len(rep.skipped)} already there; {len(pod_lines)} launch(es) priced in the ledger "
        f"(`offload-lab pod ledger --campaign {plan.campaign} --data-dir {data}`)")
    up = report.left_up()
    for ln in up:
        log(f"  {ln.cluster}: LEFT UP, its data is not home: {ln.left_up}")
    left = [x for x in launchmod.next_launches(plan_dir, campaign, plan) if x[0].cluster not in
            {ln.cluster for ln in up}] + [(ln.part, ln.part, ln.number, None) for ln in up]
    for part, what, _, _ in left:
        if part.cluster not in {ln.cluster for ln in up}:
            log(f"  {part.cluster}: not finished, left: {','.join(what.only or ['the whole campaign'])}; "
                f"`offload-lab pod launch {plan_dir}` launches it again")
    if plan.after_merge and not left and not p.no_analysis:
        from offload_lab.campaigns.progress import Progress

        log(f"after the merge, over every pod's data, here: {', '.join(plan.after_merge)}")
        with Progress("quiet", campaign=plan.campaign, experiments=len(plan.after_merge)) as progress:
            runner.run_campaign(campaign, data_root=data, only=list(plan.after_merge), progress=progress)
    if p.paper and not left:
        from offload_lab.paper import build as paper

        # the paper of this checkout over the merged data, kept with the plan that made it
        built = paper.build_paper(campaign=plan.campaign, data_root=data, out_dir=plan_dir / "paper",
                                  repo_root=paths.find_root())
        log(f"paper: {built.pdf or built.html}")
    failed = [ln for ln in report.launches if ln.outcome == "failed"]
    return 4 if left or failed else 0


# --- merge -------------------------------------------------------------------------------------------------------

def merge(p: PodMergeParams) -> dict[str, Any]:
    """Merge every fetched launch of a plan into the data tree; with a cost report, one ledger line per launch."""
    from offload_lab.pods import bill
    from offload_lab.pods import merge as mergemod
    from offload_lab.pods.launch import fetched_roots
    from offload_lab.pods.plan import PodPlan

    plan_dir = Path(p.plan_dir)
    record = read_plan(plan_dir)
    campaign = record["plan"]["campaign"]
    clusters = [part["cluster"] for part in record["plan"]["parts"]]
    # every launch of each cluster: <cluster>/data, then a relaunch's <cluster>-r1/data ...
    sources = [r for c in clusters for r in fetched_roots(plan_dir, c) if (r / campaign).is_dir()]
    missing = [c for c in clusters if not any((r / campaign).is_dir() for r in fetched_roots(plan_dir, c))]
    if missing and not p.partial:
        raise InputError(f"no data fetched yet for {', '.join(missing)} (expected {plan_dir}/<cluster>/data/"
                         f"{campaign}/: run the fetch commands of plan.json), or give --partial to merge the rest")
    pod_lines = None
    if p.cost_report:
        try:
            report = json.loads(Path(p.cost_report).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"--cost-report {p.cost_report}: cannot read it as JSON ({e}); write it with "
                             "`sky cost-report -o json --days 0 > FILE`") from e
        pod_lines = bill.pod_lines(report, plan_dir, PodPlan.model_validate(record["plan"]),
                                   record.get("stack_price"), record.get("pod") or {})
    rep = mergemod.merge(sources, Path(p.data_dir), campaign, pod_lines)
    if pod_lines:
        bill.close_lost_sessions(Path(p.data_dir), campaign, pod_lines)
    return {"campaign": campaign, "sources": [str(s) for s in sources], **rep.to_dict(), "pods": pod_lines,
            "after_merge": record.get("commands", {}).get("after_merge") or []}


# --- the operator's commands -------------------------------------------------------------------------------------

def status(p: PodStatusParams) -> dict[str, Any]:
    """Each pod of a plan: up or gone, its job, what is home, what is left, why one was left up; cost so far."""
    from offload_lab.pods import bill
    from offload_lab.pods import launch as launchmod
    from offload_lab.pods import resume

    plan_dir = Path(p.plan_dir)
    record, plan, launcher = operator(plan_dir, p.sky_python)
    live = launcher.live()
    hist = launchmod.launch_history(plan_dir)
    report = launcher.adapter.call("cost_report", {"days": 30})["records"]
    lines = bill.pod_lines(report, plan_dir, plan, record.get("stack_price"), record.get("pod") or {})
    rows = []
    for part in plan.parts:
        h, there = hist.get(part.cluster) or {}, live.get(part.cluster) or {}
        roots = launchmod.fetched_roots(plan_dir, part.cluster)
        home = sorted({exp for label, exp, m in resume.plan_runs(roots, plan.campaign, plan.plan_id)
                       if m.get("outcome") == "ok" and label == resume.part_label(part)})
        left = resume.remaining(launcher.campaign, plan, part, roots)
        mine = [x for x in lines if x["cluster"] == part.cluster]
        rows.append({"cluster": part.cluster, "launches": (h.get("number", -1) + 1) if h else 0,
                     "cluster_status": there.get("cluster_status"), "job_id": there.get("job_id") or h.get("job_id"),
                     "job_status": there.get("job_status"), "home_ok": home,
                     "left": None if left is None else (left.only or ["the whole campaign"]),
                     "left_up": h.get("left_up"),
                     "cost": {c: round(sum(x["cost"] for x in mine if x.get("currency") == c and x.get("cost")), 4)
                              for c in {x.get("currency") for x in mine if x.get("cost") is not None}},
                     "minutes": round(sum(x.get("minutes") or 0 for x in mine), 2)})
    total: dict[str, float] = {}
    for r in rows:
        for c, v in r["cost"].items():
            total[c] = round(total.get(c, 0.0) + v, 4)
    return {"plan": plan.plan_id, "campaign": plan.campaign, "plan_dir": str(plan_dir), "pods": rows,
            "cost_so_far": total}


def logs(p: PodLogsParams) -> int:
    """Print a pod's job log (followed with ``p.follow``); 0 when SkyPilot's log call ended well, else 3."""
    from offload_lab.pods import launch as launchmod

    plan_dir, cluster = (Path(p.plan), p.target) if p.plan else find_plan(p.target, Path(p.plans))
    _, plan, launcher = operator(plan_dir, p.sky_python)
    cluster = cluster or p.target
    if cluster not in {part.cluster for part in plan.parts}:
        raise InputError(f"cluster {cluster} is not one of plan {plan.plan_id}'s "
                         f"({', '.join(part.cluster for part in plan.parts)})")
    job = (launchmod.launch_history(plan_dir).get(cluster) or {}).get("job_id")
    ans = launcher.adapter.call("logs", {"cluster": cluster, "job_id": job, "managed": launcher.managed,
                                         "follow": p.follow}, on_line=say)
    return 0 if ans.get("exit_code") in (0, None) else 3


def down(p: PodDownParams, log: Callable[[str], None] = say) -> int:
    """Take a plan's pods (or one) down, each only once a last fetch has brought its data home (or ``p.force``);
    3 when a pod was kept up."""
    from offload_lab.pods import launch as launchmod

    plan_dir, cluster = find_plan(p.target, Path(p.plans))
    _, plan, launcher = operator(plan_dir, p.sky_python)
    live = launcher.live()
    hist = launchmod.launch_history(plan_dir)
    kept = 0
    for part in [part for part in plan.parts if cluster is None or part.cluster == cluster]:
        there = live.get(part.cluster) or {}
        if there.get("cluster_status") is None and there.get("job_status") not in launchmod.LIVE_JOB:
            log(f"{part.cluster}: not up, nothing to take down")
            continue
        h = hist.get(part.cluster) or {"number": 0}
        ln = launchmod.Launch(cluster=part.cluster, number=h["number"], part=part, task=plan_dir / "-",
                              data=launchmod.data_dir(plan_dir, part.cluster, h["number"]),
                              managed=launcher.managed, job_id=there.get("job_id") or h.get("job_id"))
        if there.get("job_status") in launchmod.LIVE_JOB and not p.force:
            log(f"{part.cluster}: job {ln.job_id} still runs; not taken down (--force to stop it, losing the run in "
                "progress)")
            kept += 1
            continue
        if not launcher._fetch(ln) and not p.force:
            log(f"{part.cluster}: its data could not be fetched ({ln.fetch_error}); NOT taken down "
                "(--force takes it down anyway, losing what is not home)")
            kept += 1
            continue
        launcher._record(ln, "operator_down", forced=bool(p.force))
        launcher._down(ln)
    return 3 if kept else 0


def ledger(p: PodLedgerParams) -> dict[str, Any]:
    from offload_lab.campaigns import ledger as ledgermod

    pods = ledgermod.read_pods(Path(p.data_dir), p.campaign)
    return {"pods": pods, "totals": ledgermod.pod_totals(pods)}
