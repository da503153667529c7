"""A ledger to bill from: the launcher's report (``sky cost-report``) turned into one ``pod`` line per launch of the
plan's clusters, and the sessions a lost pod left open closed at the pod's end.

- a managed job's cluster is ``<name>-<job_id>`` in SkyPilot's report (sky/jobs/utils.py names it so): matched to
  the plan's cluster by the job ids ``launches.jsonl`` recorded, never by prefix;
- each line names the launch number it was (``<cluster>`` is 0, ``<cluster>-r<N>`` data is N), from the order of
  the launcher's own records, and why a cluster was left up when it was;
- where SkyPilot gives no price the stack file's (one node's) is used, times the nodes
  (:func:`offload_lab.campaigns.ledger.pod_records`);
- a session whose pod was gone before it could write its end line (preempted) is closed at the pod's end, with the
  minutes it ran, and says so.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from offload_lab.campaigns import ledger
from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.pods.launch import LAUNCHES
from offload_lab.pods.plan import PodPlan


def _ts(iso: str | None) -> float | None:
    if not iso:
        return None
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _history(plan_dir: Path) -> list[dict[str, Any]]:
    path = plan_dir / LAUNCHES
    return list(runs.read_events(path)) if path.is_file() else []


def pod_lines(report: list[dict[str, Any]], plan_dir: Path, plan: PodPlan, stack_price: dict[str, Any] | None,
              pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's ``pod`` ledger lines from SkyPilot's report; see the module docstring."""
    events = _history(plan_dir)
    clusters = [p.cluster for p in plan.parts]
    job_names = {f"{e['cluster']}-{e['job_id']}": str(e["cluster"]) for e in events
                 if e.get("job_id") is not None and e.get("cluster") in clusters}
    mapped = []
    for r in report if isinstance(report, list) else []:
        name = r.get("name") if isinstance(r, dict) else None
        cluster = name if name in clusters else job_names.get(str(name))
        if cluster is None:
            continue
        mapped.append({**r, "name": cluster, "sky_cluster": name,
                       "num_nodes": r.get("num_nodes") or pod.get("nodes") or 1})
    lines = ledger.pod_records(mapped, clusters, stack_price)
    by_hash = {str(r.get("cluster_hash") or r.get("launched_at")): r for r in mapped}
    starts = {c: sorted((_ts(e["at"]) or 0.0, int(e["launch"])) for e in events
                        if e.get("event") == "launch" and e.get("cluster") == c) for c in clusters}
    left = {}
    for e in events:
        if e.get("event") == "left_up":
            left[(e["cluster"], int(e["launch"]))] = e.get("why")
        elif e.get("event") in ("down", "attached"):
            left.pop((e["cluster"], int(e["launch"])), None)
    for line in lines:
        rec = by_hash.get(str(line.get("launch")))
        if rec is None:
            continue
        line["sky_cluster"] = rec["sky_cluster"]
        # the launch this record is: the last one the launcher started before SkyPilot's launched_at
        started = float(rec.get("launched_at") or 0)
        earlier = [n for t, n in starts.get(line["cluster"], []) if int(t) <= started]
        line["launch_number"] = max(earlier) if earlier else None
        why = left.get((line["cluster"], line["launch_number"]))
        if why and line.get("open"):
            line["left_up"] = why
    return lines


def close_lost_sessions(data_root: Path, campaign: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """End lines for the sessions of a launch that is over (its pod line closed) and that never wrote their own:
    the pod was lost under them. Each ends at the pod's end, with the minutes from its start to then."""
    try:
        sessions = ledger.read_ledger(data_root, campaign)
    except InputError:  # no ledger yet: nothing to close
        return []
    closed = []
    for s in sessions:
        if not s.get("open"):
            continue
        started = _ts(s.get("started_at"))
        name = (s.get("pod") or {}).get("name")
        over = [p for p in lines if p.get("cluster") == name and p.get("open") is False and started is not None
                and (_ts(p.get("started_at")) or 0) <= started <= (_ts(p.get("ended_at")) or 0)]
        if not over:
            continue
        end = over[0]["ended_at"]
        minutes = max(((_ts(end) or 0) - started) / 60, 0.0)
        price = s.get("price")
        line = {"event": "end", "session": s["session"], "campaign": campaign, "ended_at": end,
                "minutes": round(minutes, 3),
                "cost": round(minutes / 60 * float(price["per_hour"]), 4) if price else None,
                "currency": price["currency"] if price else None, "outcome": "lost",
                "error": f"its pod ({name}, launch {over[0].get('launch')}) was gone before the session ended: "
                         "closed at the pod's end as the launcher reports it", "runs": [],
                "closed_by": "offload-lab pod launch"}
        ledger._append(ledger.ledger_path(data_root, campaign), line)  # the ledger's own append: one line, fsync'd
        closed.append(line)
    return closed
