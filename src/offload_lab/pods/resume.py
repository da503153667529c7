"""What a pod of a plan still has to run, from the data it sent back: a pod lost mid-campaign (preempted, its machine
gone) is launched again with only that.

Runs count for a part only when a session of this plan and part made them: every session's ledger start line names
its ``pod.plan`` and ``pod.part`` (``OFFLOAD_LAB_POD_PLAN``/``_PART``, set by the plan's tasks), and every run's
manifest names its session. Runs the checkout carried to the pod (committed data, earlier campaigns) never count.

- a part that names experiments: those without an ``ok`` run are left; the boot attempts are done when each attempt
  of the campaign has a finished run (a failed boot is data, not something to redo);
- a repeat-boot part: a round is done when every server experiment of the part has an ``ok`` run from it; the part
  left boots the rest of its share.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

from offload_lab.campaigns import ledger
from offload_lab.campaigns.runner import BOOTS, Campaign
from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.pods.plan import PodPart, PodPlan


def part_label(part: PodPart) -> str:
    """The part as the ledger records it (``OFFLOAD_LAB_POD_PART``)."""
    return f"{part.index + 1}/{part.of}"


def plan_sessions(roots: Iterable[Path], campaign: str, plan_id: str) -> dict[str, str | None]:
    """Session id -> part label, for the sessions of this plan in any of the data roots."""
    out: dict[str, str | None] = {}
    for root in roots:
        path = ledger.ledger_path(root, campaign)
        if not path.is_file():
            continue
        for e in runs.read_events(path):
            pod = e.get("pod") if isinstance(e.get("pod"), dict) else {}
            if e.get("event") == "start" and pod.get("plan") == plan_id:
                out[str(e.get("session"))] = pod.get("part")
    return out


def plan_runs(roots: Iterable[Path], campaign: str, plan_id: str) -> list[tuple[str | None, str, dict]]:
    """(part label, experiment, manifest) of every run a session of this plan made, once per run id."""
    roots = list(roots)
    sessions = plan_sessions(roots, campaign, plan_id)
    seen: set[str] = set()
    out = []
    for root in roots:
        for run_dir in runs.iter_runs(root, campaign):
            try:
                m = runs.load_manifest(run_dir)
            except InputError:
                continue  # a damaged run is not done; the merge reports it
            sid = m.get("session")
            if sid in sessions and run_dir.name not in seen:
                seen.add(run_dir.name)
                out.append((sessions[sid], run_dir.parent.name, m))
    return out


def remaining(campaign: Campaign, plan: PodPlan, part: PodPart, roots: Iterable[Path]) -> PodPart | None:
    """The part still to run (same cluster name), or None when its data holds everything it was to run."""
    mine = [(exp, m) for label, exp, m in plan_runs(roots, plan.campaign, plan.plan_id) if label == part_label(part)]
    ok = Counter(exp for exp, m in mine if m.get("outcome") == "ok")
    attempts = {str((m.get("parameters") or {}).get("boot")) for exp, m in mine
                if exp == BOOTS and m.get("outcome") != "running"}
    wanted_boots = {b.name for b in campaign.spec.boots}
    spec_names = ([BOOTS] if campaign.spec.boots else []) + [e.experiment for e in campaign.spec.experiments]
    names = list(part.only) if part.only is not None else spec_names
    boots_left = BOOTS in names and not wanted_boots <= attempts
    others = [n for n in names if n != BOOTS]
    if part.repeat_boots is not None:
        rounds = min((ok[n] for n in others), default=part.repeat_boots)
        k = max(part.repeat_boots - rounds, 0)
        if k == 0 and not boots_left:
            return None
        only = ([BOOTS] if boots_left else []) + (others if k else [])
        return part.model_copy(update={"only": only, "repeat_boots": k or None})
    left = ([BOOTS] if boots_left else []) + [n for n in others if ok[n] == 0]
    if not left:
        return None
    return part.model_copy(update={"only": left})
