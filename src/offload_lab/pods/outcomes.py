"""The pod commands' answers as the command line shows them: each an Outcome of :mod:`offload_lab.pods.commands`'
result (its JSON) and the lines the text display prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload_lab.core.outcome import Outcome
from offload_lab.pods.commands import (PodLedgerParams, PodMergeParams, PodPlanParams, PodStatusParams, ledger,
                                       make_plan, merge, status)


def _pod_text(p: dict[str, Any]) -> str:
    cost = "no cost" if p.get("cost") is None else f"{p['cost']:.2f} {p['currency']}"
    state = "OPEN (still up)" if p.get("open") else "not listed by the launcher" if p.get("open") is None else \
        f"{p.get('started_at')} -> {p.get('ended_at')}"
    minutes = "" if p.get("minutes") is None else f"{p['minutes']:.1f} min, "
    return f"{state}, {minutes}{cost} (price from {p.get('source')})"


def status_outcome(p: PodStatusParams) -> Outcome:
    """:func:`status` as the command shows it."""
    r = status(p)
    out: list[str] = []
    write = out.append
    write(f"plan {r['plan']} ({r['campaign']}), {r['plan_dir']}:")
    for x in r["pods"]:
        state = x["cluster_status"] or ("job " + x["job_status"] if x["job_status"] else "not up")
        cost = ", ".join(f"{v:.2f} {c}" for c, v in x["cost"].items()) or "no cost yet"
        write(f"  {x['cluster']}: {state}" + (f", job {x['job_id']} {x['job_status']}" if x["cluster_status"]
                                              and x["job_id"] else "")
              + f"; {x['launches']} launch(es), {x['minutes']:.1f} min, {cost}; home: "
              + (", ".join(x["home_ok"]) or "nothing") + "; left: " + (", ".join(x["left"] or []) or "nothing"))
        if x["left_up"]:
            write(f"    LEFT UP: {x['left_up']}")
    write("cost so far: " + (", ".join(f"{v:.2f} {c}" for c, v in r["cost_so_far"].items()) or "nothing priced yet")
          + " (SkyPilot's catalog prices, not the invoice)")
    return Outcome({k: v for k, v in r.items() if k != "plan_dir"}, out)


def ledger_outcome(p: PodLedgerParams) -> Outcome:
    """:func:`ledger` as the command shows it."""
    r = ledger(p)
    out: list[str] = []
    write = out.append
    if not r["pods"]:
        write(f"campaign {p.campaign} has no launcher records (`offload-lab pod merge ... --cost-report` adds "
              "them); `offload-lab campaign ledger` shows its sessions")
        return Outcome(r, out)
    for x in r["pods"]:
        launch = f" (launch {x['launch']})" if x.get("launch") not in (None, "None") else ""
        write(f"{x['cluster']}{launch}  {_pod_text(x)}  sessions: {', '.join(x['sessions']) or '-'}")
    tot = r["totals"]
    costs = "; ".join(f"{src}: " + ", ".join(f"{v:.2f} {c}" for c, v in by.items())
                      for src, by in tot["cost_by_source"].items()) or "no priced pod"
    write(f"{tot['pods']} pod(s), {tot['open']} open, {tot['unlisted']} not listed; {tot['minutes']:.1f} paid "
          f"minutes; {costs}")
    return Outcome(r, out)


def merge_outcome(p: PodMergeParams) -> Outcome:
    """:func:`merge` as the command shows it."""
    r = merge(p)
    after = r.pop("after_merge")
    out: list[str] = []
    write = out.append
    write(f"merged {len(r['sources'])} pod(s) into {Path(p.data_dir) / r['campaign']}: {len(r['copied'])} run(s) "
          f"copied, {len(r['skipped'])} already there, {r['ledger_lines']} ledger line(s) appended")
    for u in r["unfinished"]:
        write(f"  unfinished (still marked running; its pod stopped mid-run): {u}")
    for line in r["pods"] or []:
        write(f"  pod {line['cluster']}: {_pod_text(line)}")
    if after:
        write("now, over every pod's data: " + " && ".join(after))
    return Outcome(r, out)


def plan_outcome(p: PodPlanParams) -> Outcome:
    """:func:`make_plan` as ``pod plan`` shows it."""
    made = make_plan(p)
    record, plan, pod, shown = made["record"], made["plan"], made["pod"], made["shown"]
    lines: list[str] = []
    write = lines.append
    write(f"{len(record['tasks'])} SkyPilot task(s) for campaign {plan.campaign} ({plan.split}) in {shown}/")
    for part in plan.parts:
        what = ("the whole campaign" if not part.only else "--only " + ",".join(part.only)) + (
            f", {part.repeat_boots} boot(s)" if part.repeat_boots else "")
        write(f"  {part.cluster}: {pod.nodes} x {pod.accelerator}:{pod.count}, {what}; installs "
              + ", ".join(record["stacks"][part.cluster]))
    if record.get("skypilot"):
        write(f"  every task loads with SkyPilot {record['skypilot']['version']}'s parser")
    if "placement" in record and not record["placement"]:
        write(f"  placement: {pod.count} x {pod.accelerator} is not in the catalog snapshot "
              "(resources/skypilot_catalog): SkyPilot's optimizer places it at launch")
    for cloud, o in (record.get("placement") or {}).items():
        write(f"  placement on {cloud}: no instance meets the request" if o is None else
              f"  placement on {cloud}: {o['instance']} ({o['region']}, {o['vcpus']:g} vCPUs, {o['memory_gib']:g} "
              f"GiB), {o['price']:.2f} USD an hour a node"
              + (f", {o['total_per_hour']:.2f} for {o['nodes']} nodes" if o["nodes"] > 1 else "")
              + f", each of the {len(plan.parts)} pod(s); SkyPilot's catalog price, not the invoice")
    for step, lines in record["commands"].items():
        if lines:
            write(f"{step}:\n" + "\n".join(f"  {line}" for line in lines))
    return Outcome({**record, "out": str(made["out"]),
                    "task_files": [str(made["out"] / t) for t in record["tasks"]]}, lines)
