"""What a plan folder remembers of its launches (``launches.jsonl``, append-only) and where each launch's data came
home: the latest launch of each cluster, and what is left to launch, re-attach to or relaunch on a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offload_lab.campaigns.runner import Campaign
from offload_lab.core import runs
from offload_lab.pods import resume
from offload_lab.pods.plan import PodPart, PodPlan

LAUNCHES = "launches.jsonl"
LIVE_JOB = ("PENDING", "SETTING_UP", "RUNNING", "STARTING", "RECOVERING", "SUBMITTED", "INIT")


def data_dir(plan_dir: Path, cluster: str, number: int) -> Path:
    """Where a launch's data comes back: ``<cluster>/data`` for the first, ``<cluster>-r<N>/data`` for relaunch N."""
    return plan_dir / (cluster if number == 0 else f"{cluster}-r{number}") / "data"


def fetched_roots(plan_dir: Path, cluster: str) -> list[Path]:
    """Every launch's data folder of this cluster, in launch order (what ``pod merge`` reads)."""
    roots = [data_dir(plan_dir, cluster, 0)]
    n = 1
    while data_dir(plan_dir, cluster, n).parent.is_dir():
        roots.append(data_dir(plan_dir, cluster, n))
        n += 1
    return [r for r in roots if r.is_dir()]


def launch_history(plan_dir: Path) -> dict[str, dict[str, Any]]:
    """Per cluster, its latest launch as launches.jsonl has it: number, only, repeat_boots, job_id, and whether it
    ended (the launcher saw its end and brought what it could home) or was left up."""
    out: dict[str, dict[str, Any]] = {}
    path = plan_dir / LAUNCHES
    if not path.is_file():
        return out
    for e in runs.read_events(path):
        c = str(e.get("cluster"))
        if e.get("event") == "launch":
            out[c] = {"number": int(e["launch"]), "only": e.get("only"), "repeat_boots": e.get("repeat_boots"),
                      "job_id": None, "ended": False, "left_up": None}
        elif c in out and int(e.get("launch", -1)) == out[c]["number"]:
            if e.get("job_id") is not None:
                out[c]["job_id"] = e.get("job_id")
            if e.get("event") == "ended":
                out[c]["ended"] = True
            if e.get("event") == "left_up":
                out[c]["left_up"] = e.get("why")
            if e.get("event") in ("down", "attached"):
                out[c]["left_up"] = None
    return out


def next_launches(plan_dir: Path, campaign: Campaign, plan: PodPlan,
                  live: dict[str, dict[str, Any]] | None = None) -> list[tuple[PodPart, PodPart, int,
                                                                              dict[str, Any] | None]]:
    """(plan part, what to launch, launch number, launch to re-attach to) for every part with work left: a part
    never launched as it is; a part whose cluster (or managed job) is still there, re-attached as it was launched;
    a part launched before and gone with what its fetched data does not hold yet."""
    hist = launch_history(plan_dir)
    live = live or {}
    out: list[tuple[PodPart, PodPart, int, dict[str, Any] | None]] = []
    for part in plan.parts:
        h = hist.get(part.cluster)
        if h is None:
            out.append((part, part, 0, None))
            continue
        there = live.get(part.cluster) or {}
        job = there.get("job_status")
        if there.get("cluster_status") is not None or job in LIVE_JOB or (job is not None and not h["ended"]):
            launched = part.model_copy(update={"only": h["only"], "repeat_boots": h["repeat_boots"]})
            out.append((part, launched, h["number"], {"job_id": there.get("job_id") or h["job_id"]}))
            continue
        left = resume.remaining(campaign, plan, part, fetched_roots(plan_dir, part.cluster))
        if left is not None:
            out.append((part, left, h["number"] + 1, None))
    return out
