"""A campaign spread over several pods: which experiments, or how many repeat boots, each pod runs.

Splits (``--split``):

``experiments``   the units are the boot attempts (one unit, kept together) and each experiment that needs a server;
                  consecutive experiments on one server variant share a boot, so cuts fall between variants where
                  the pod count allows. Each pod runs ``campaign run FILE --only a,b``.
``repeat_boots``  a campaign with ``repeat_boots: k`` boots ``k_i`` times on pod i (the k_i sum to k); each pod runs
                  every server experiment (and the boot attempts), from a copy of the campaign file with
                  ``repeat_boots: k_i``.
``none``          one pod runs the whole campaign.

Experiments that need no server (audit, boot_spread) read data only: with more than one pod they run after the
merge, on the laptop, over every pod's data (``after_merge``).
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from offload_lab.campaigns.runner import BOOTS, Campaign
from offload_lab.core.errors import InputError

SPLITS = ("auto", "none", "experiments", "repeat_boots")
PLAN_ID = re.compile(r"^[a-z0-9]{1,8}$")
CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # stricter than SkyPilot's, valid on every cloud


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PodPart(_Strict):
    index: int
    of: int
    cluster: str
    only: list[str] | None = Field(None, description="--only for this pod; None: the whole campaign")
    repeat_boots: int | None = Field(None, description="this pod's share of the campaign's repeat_boots")


class PodPlan(_Strict):
    plan_id: str
    campaign: str
    campaign_file: str = Field(description="relative to the repository root, as the pod's checkout has it")
    stack_file: str
    split: Literal["none", "experiments", "repeat_boots"]
    parts: list[PodPart]
    after_merge: list[str] = Field(default_factory=list,
                                   description="experiments that need no server: run locally after the merge")


def new_plan_id() -> str:
    return secrets.token_hex(2)


def cluster_name(campaign: str, plan_id: str, index: int) -> str:
    base = re.sub(r"[^a-z0-9-]", "-", campaign.lower())[:20].strip("-")
    name = f"ol-{base}-{plan_id}-{index}"
    if not CLUSTER_NAME.match(name):
        raise InputError(f"cluster name {name!r} (from campaign {campaign!r} and plan id {plan_id!r}) is not valid "
                         "for SkyPilot: lower-case letters, digits and '-' only")
    return name


def variant_groups(campaign: Campaign, only: set[str] | None = None) -> list[list[str]]:
    """Server experiments in the order they run, grouped where they share a server (consecutive, same variant);
    the boot attempts first, as one group. ``only``: just these (``--only``)."""
    groups: list[list[str]] = [[BOOTS]] if campaign.spec.boots else []
    last = None
    for e in campaign.spec.experiments:
        if not e.needs_server:
            continue
        key = (e.stack or "", e.override.key() if e.override else "")
        if groups and key == last and groups[-1] != [BOOTS]:
            groups[-1].append(e.experiment)
        else:
            groups.append([e.experiment])
        last = key
    if only is not None:
        groups = [kept for kept in ([x for x in g if x in only] for g in groups) if kept]
    return groups


def shares(total: int, n: int) -> list[int]:
    """``total`` shared out over ``n`` as evenly as whole numbers allow, the larger shares first."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def _by_experiments(campaign: Campaign, pods: int, only: set[str] | None) -> list[list[str]]:
    groups = variant_groups(campaign, only)
    units = sum(len(g) for g in groups)
    if pods > units:
        raise InputError(f"campaign {campaign.spec.name} ({campaign.file}) has {units} part(s) that can run apart "
                         f"(the boot attempts, and each experiment that needs a server); it cannot be spread over "
                         f"{pods} pods. Use --pods {units} or fewer")
    # Split the largest group (never the boot attempts) until there is a group per pod, then deal them out in order.
    while len(groups) < pods:
        i = max((j for j, g in enumerate(groups) if g != [BOOTS] and len(g) > 1), key=lambda j: len(groups[j]))
        g = groups[i]
        groups[i:i + 1] = [g[:len(g) // 2], g[len(g) // 2:]]
    out, start = [], 0
    for n in shares(len(groups), pods):
        out.append([x for grp in groups[start:start + n] for x in grp])
        start += n
    return out


def plan_pods(campaign: Campaign, stack_file: Path, pods: int = 1, split: str = "auto",
              plan_id: str | None = None, only: list[str] | None = None) -> PodPlan:
    """Which part of the campaign (all of it, or the experiments ``only`` names) each of ``pods`` pods runs;
    InputError for a split the campaign cannot take."""
    spec = campaign.spec
    known = ([BOOTS] if spec.boots else []) + [e.experiment for e in spec.experiments]
    if only is not None and (not only or set(only) - set(known)):
        raise InputError(f"--only names experiments not in {campaign.file}: {sorted(set(only) - set(known))} "
                         f"(it has {known})")
    sel = set(only) if only is not None else None

    def picked(name: str) -> bool:
        return sel is None or name in sel

    plan_id = plan_id or new_plan_id()
    if not PLAN_ID.match(plan_id):
        raise InputError(f"--plan-id {plan_id!r}: use 1 to 8 lower-case letters or digits (it names the clusters)")
    if pods < 1:
        raise InputError(f"--pods must be at least 1, not {pods}")
    if split not in SPLITS:
        raise InputError(f"--split {split!r} is not one of {', '.join(SPLITS)}")
    if split == "auto":
        split = "none" if pods == 1 else "repeat_boots" if spec.repeat_boots > 1 else "experiments"
    analysis = [e.experiment for e in spec.experiments if not e.needs_server and picked(e.experiment)]
    server = [e.experiment for e in spec.experiments if e.needs_server and picked(e.experiment)]
    if not server and split != "none":
        raise InputError(f"campaign {spec.name} has no experiment that needs a server: nothing to spread over pods")

    def part(i: int, n: int, only: list[str] | None = None, k: int | None = None) -> PodPart:
        return PodPart(index=i, of=n, cluster=cluster_name(spec.name, plan_id, i), only=only, repeat_boots=k)

    if split == "none":
        if pods != 1:
            raise InputError("--split none runs the whole campaign on one pod; leave out --pods or choose a split")
        parts, analysis = [part(0, 1, list(only) if only else None)], []
    elif split == "experiments":
        parts = [part(i, pods, names) for i, names in enumerate(_by_experiments(campaign, pods, sel))]
    else:
        if spec.repeat_boots < 2:
            raise InputError(f"campaign {spec.name} has repeat_boots {spec.repeat_boots}: no repeat boots to spread; "
                             "use --split experiments")
        if pods > spec.repeat_boots:
            raise InputError(f"campaign {spec.name} repeats {spec.repeat_boots} boots; it cannot be spread over "
                             f"{pods} pods. Use --pods {spec.repeat_boots} or fewer")
        names = ([BOOTS] if spec.boots and picked(BOOTS) else []) + server  # each pod's boot attempts are data too
        parts = [part(i, pods, names, k) for i, k in enumerate(shares(spec.repeat_boots, pods))]
    return PodPlan(plan_id=plan_id, campaign=spec.name, campaign_file=_rel(campaign.file, campaign.root),
                   stack_file=_rel(stack_file, campaign.root), split=split, parts=parts, after_merge=analysis)


def _same_file(campaign: Campaign, a: str | None, b: str | None) -> bool:
    pa, pb = campaign.stack_path(a), campaign.stack_path(b)
    return pa is not None and pb is not None and pa.resolve() == pb.resolve()


def part_campaign_text(campaign: Campaign, part: PodPart, stack_file: str | None = None) -> str | None:
    """The campaign file a pod runs when it is not the campaign's own: its share of the boots (repeat-boot parts)
    and, when the plan rents another stack than the campaign names (``--stack``), that stack as the campaign's
    (same name, so its runs land in the same campaign directory); None when the pod runs the campaign file as it
    is."""
    restack = stack_file is not None and not _same_file(campaign, stack_file, campaign.spec.stack)
    if part.repeat_boots is None and not restack:
        return None
    data = yaml.safe_load(campaign.file.read_text(encoding="utf-8"))
    notes = []
    if part.repeat_boots is not None:
        data["repeat_boots"] = part.repeat_boots
        notes.append(f"{part.repeat_boots} of {campaign.spec.repeat_boots} boots")
    if restack:
        data["stack"] = stack_file  # the planned stack serves what the campaign's own would have
        notes.append(f"stack {stack_file}")
    data["description"] = (f"{data.get('description', '')} [pod {part.index + 1} of {part.of}: "
                           f"{'; '.join(notes)}]").strip()
    return yaml.safe_dump(data, sort_keys=False, width=1000)


def part_stacks(campaign: Campaign, plan: PodPlan, part: PodPart) -> list[str]:
    """Every stack file (relative to the checkout) the part boots or serves, in the order the campaign first needs
    them: the planned stack for whatever uses the campaign's, and each boot's or experiment's own ``stack:``."""
    spec = campaign.spec
    names = set(part.only) if part.only is not None else None

    def picked(name: str) -> bool:
        return names is None or name in names

    wanted: list[str | None] = []
    if spec.boots and picked(BOOTS):
        wanted += [b.stack for b in spec.boots]
    if part.repeat_boots or (spec.repeat_boots > 1 and part.only is None):
        wanted.append(None)
    wanted += [e.stack for e in spec.experiments if e.needs_server and picked(e.experiment)]
    out: list[str] = []
    for name in wanted:
        rel = plan.stack_file if name is None or _same_file(campaign, name, spec.stack) else \
            _rel(campaign.stack_path(name), campaign.root)  # type: ignore[arg-type]
        if rel not in out:
            out.append(rel)
    return out


def _rel(p: Path, root: Path) -> str:
    p = Path(p).resolve()
    if not p.is_relative_to(root.resolve()):
        raise InputError(f"{p} is outside the repository {root}: the pod gets the checkout, so campaign and stack "
                         "files must be in it")
    return str(p.relative_to(root.resolve()))
