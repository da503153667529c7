"""``offload-lab pod status|logs|down``: the operator's commands on a launched plan (what is up, what is home, what
it cost so far; a pod's log; taking pods down only once their data is home), and reading a plan folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from offload_lab.cli.common import print_json
from offload_lab.core.errors import InputError

PLAN_FILE = "plan.json"


def read_plan(plan_dir: Path) -> dict[str, Any]:
    p = plan_dir / PLAN_FILE
    if not p.is_file():
        raise InputError(f"{plan_dir} has no {PLAN_FILE}: give the folder `offload-lab pod plan` wrote")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{p} is not valid JSON ({e}); write the plan again with `offload-lab pod plan`") from e


def say(line: str) -> None:
    print(line, flush=True)


def load_plan_dir(plan_dir: Path) -> tuple[dict[str, Any], Any, Any, Any, Any]:
    """plan.json's record, the plan, its campaign, its stack and task options, from the checkout it was made in."""
    from offload_lab.campaigns import runner
    from offload_lab.core import paths
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


def cmd_pod_status(args: argparse.Namespace) -> int:
    """Each pod of a plan: up or gone, its job, what is home, what is left, why one was left up; cost so far."""
    from offload_lab.pods import bill
    from offload_lab.pods import launch as launchmod
    from offload_lab.pods import resume

    plan_dir = Path(args.plan_dir)
    record, plan, launcher = operator(plan_dir, args.sky_python)
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
    if args.json:
        print_json({"plan": plan.plan_id, "campaign": plan.campaign, "pods": rows, "cost_so_far": total})
        return 0
    print(f"plan {plan.plan_id} ({plan.campaign}), {plan_dir}:")
    for r in rows:
        state = r["cluster_status"] or ("job " + r["job_status"] if r["job_status"] else "not up")
        cost = ", ".join(f"{v:.2f} {c}" for c, v in r["cost"].items()) or "no cost yet"
        print(f"  {r['cluster']}: {state}" + (f", job {r['job_id']} {r['job_status']}" if r["cluster_status"]
                                              and r["job_id"] else "")
              + f"; {r['launches']} launch(es), {r['minutes']:.1f} min, {cost}; home: "
              + (", ".join(r["home_ok"]) or "nothing") + "; left: " + (", ".join(r["left"] or []) or "nothing"))
        if r["left_up"]:
            print(f"    LEFT UP: {r['left_up']}")
    print("cost so far: " + (", ".join(f"{v:.2f} {c}" for c, v in total.items()) or "nothing priced yet")
          + " (SkyPilot's catalog prices, not the invoice)")
    return 0


def cmd_pod_logs(args: argparse.Namespace) -> int:
    from offload_lab.pods import launch as launchmod

    plan_dir, cluster = (Path(args.plan), args.target) if args.plan else find_plan(args.target, Path(args.plans))
    _, plan, launcher = operator(plan_dir, args.sky_python)
    cluster = cluster or args.target
    if cluster not in {p.cluster for p in plan.parts}:
        raise InputError(f"cluster {cluster} is not one of plan {plan.plan_id}'s "
                         f"({', '.join(p.cluster for p in plan.parts)})")
    job = (launchmod.launch_history(plan_dir).get(cluster) or {}).get("job_id")
    ans = launcher.adapter.call("logs", {"cluster": cluster, "job_id": job, "managed": launcher.managed,
                                         "follow": args.follow}, on_line=lambda s: print(s, flush=True))
    return 0 if ans.get("exit_code") in (0, None) else 3


def cmd_pod_down(args: argparse.Namespace) -> int:
    """Take a plan's pods (or one) down, each only once a last fetch has brought its data home (or --force)."""
    from offload_lab.pods import launch as launchmod

    plan_dir, cluster = find_plan(args.target, Path(args.plans))
    _, plan, launcher = operator(plan_dir, args.sky_python)
    live = launcher.live()
    hist = launchmod.launch_history(plan_dir)
    wanted = [p for p in plan.parts if cluster is None or p.cluster == cluster]
    kept = 0
    for part in wanted:
        there = live.get(part.cluster) or {}
        if there.get("cluster_status") is None and there.get("job_status") not in launchmod.LIVE_JOB:
            print(f"{part.cluster}: not up, nothing to take down")
            continue
        h = hist.get(part.cluster) or {"number": 0}
        ln = launchmod.Launch(cluster=part.cluster, number=h["number"], part=part, task=plan_dir / "-",
                              data=launchmod.data_dir(plan_dir, part.cluster, h["number"]),
                              managed=launcher.managed, job_id=there.get("job_id") or h.get("job_id"))
        if there.get("job_status") in launchmod.LIVE_JOB and not args.force:
            print(f"{part.cluster}: job {ln.job_id} still runs; not taken down (--force to stop it, losing the run "
                  "in progress)")
            kept += 1
            continue
        if not launcher._fetch(ln) and not args.force:
            print(f"{part.cluster}: its data could not be fetched ({ln.fetch_error}); NOT taken down "
                  "(--force takes it down anyway, losing what is not home)")
            kept += 1
            continue
        launcher._record(ln, "operator_down", forced=bool(args.force))
        launcher._down(ln)
    return 3 if kept else 0
