"""``offload-lab pod plan|merge|ledger``: a campaign on rented pods through SkyPilot, their data merged back, and
what the launcher says they cost. Handlers and help texts live here so that ``cli/main.py`` only gains a call to
:func:`add_parsers`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from offload_lab.cli.common import action_group, int_at_least, print_json
from offload_lab.core.errors import InputError

PLAN_FILE = "plan.json"


def _load(campaign_file: str, stack_file: str | None) -> tuple[Any, Any, Path]:
    from offload_lab.campaigns import runner
    from offload_lab.server import stack as stackmod

    campaign = runner.load_campaign(campaign_file)
    stack_path = Path(stack_file) if stack_file else campaign.stack_path(None)
    if stack_path is None:
        raise InputError(f"campaign file {campaign_file} names no stack; give --stack")
    st = stackmod.load_stack(stack_path, root=campaign.root)
    return campaign, st, stack_path


def cmd_pod_plan(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import runner
    from offload_lab.pods import plan as planmod
    from offload_lab.pods import skypilot as sp

    campaign, st, stack_path = _load(args.campaign, args.stack)
    runner.validate(campaign)  # a campaign that would fail on the pod fails here, before anything is rented
    pod = sp.pod_of(st.spec, str(stack_path))
    only = [x for x in args.only.split(",") if x] if args.only else None
    plan = planmod.plan_pods(campaign, stack_path, pods=args.pods, split=args.split, plan_id=args.plan_id, only=only)
    opts = sp.TaskOptions(git_url=args.git_url, git_ref=args.git_ref, bucket=args.bucket, store=args.store,
                          allow_unpinned=args.allow_unpinned)
    out = Path(args.out) if args.out else campaign.root / "_output" / "pods" / plan.plan_id
    if out.exists() and any(out.iterdir()) and not args.force:
        raise InputError(f"{out} exists and is not empty; give another --out, or --force to write over it")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for part in plan.parts:
        path = out / f"{part.cluster}.yaml"
        path.write_text(sp.task_yaml(sp.task_dict(plan, part, st.spec, campaign, opts)), encoding="utf-8")
        written.append(path)
    shown = str(out.relative_to(Path.cwd())) if out.resolve().is_relative_to(Path.cwd()) else str(out)
    cmds = sp.commands(plan, shown, opts, pod.autodown_idle_minutes)
    record = {"plan": plan.model_dump(), "stack_price": st.spec.price.model_dump() if st.spec.price else None,
              "pod": pod.model_dump(), "commands": cmds, "tasks": [p.name for p in written]}
    checked = None
    if args.check:
        checked = sp.check_tasks(written, sp.sky_python(args.sky_python, campaign.root))
        record["skypilot"] = {"version": checked[0]["sky_version"], "tasks": len(checked)}
    (out / PLAN_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print_json({**record, "out": str(out)})
        return 0
    print(f"{len(written)} SkyPilot task(s) for campaign {plan.campaign} ({plan.split}) in {shown}/")
    for part in plan.parts:
        what = ("the whole campaign" if not part.only else "--only " + ",".join(part.only)) + (
            f", {part.repeat_boots} boot(s)" if part.repeat_boots else "")
        print(f"  {part.cluster}: {pod.nodes} x {pod.accelerator}:{pod.count}, {what}")
    if checked:
        print(f"  every task loads with SkyPilot {checked[0]['sky_version']}'s parser")
    for step, lines in cmds.items():
        if lines:
            print(f"{step}:")
            for line in lines:
                print(f"  {line}")
    return 0


def _read_plan(plan_dir: Path) -> dict[str, Any]:
    p = plan_dir / PLAN_FILE
    if not p.is_file():
        raise InputError(f"{plan_dir} has no {PLAN_FILE}: give the folder `offload-lab pod plan` wrote")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"{p} is not valid JSON ({e}); write the plan again with `offload-lab pod plan`") from e


def cmd_pod_merge(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import ledger
    from offload_lab.pods import merge as mergemod

    plan_dir = Path(args.plan_dir)
    record = _read_plan(plan_dir)
    campaign = record["plan"]["campaign"]
    clusters = [p["cluster"] for p in record["plan"]["parts"]]
    sources = [plan_dir / c / "data" for c in clusters if (plan_dir / c / "data" / campaign).is_dir()]
    missing = [c for c in clusters if not (plan_dir / c / "data" / campaign).is_dir()]
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
        pod_lines = ledger.pod_records(report, clusters, record.get("stack_price"))
    rep = mergemod.merge(sources, Path(args.data_dir), campaign, pod_lines)
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
        print(f"{p['cluster']}  {_pod_text(p)}  sessions: {', '.join(p['sessions']) or '-'}")
    costs = "; ".join(f"{src}: " + ", ".join(f"{v:.2f} {c}" for c, v in by.items())
                      for src, by in tot["cost_by_source"].items()) or "no priced pod"
    print(f"{tot['pods']} pod(s), {tot['open']} open, {tot['unlisted']} not listed; {tot['minutes']:.1f} paid "
          f"minutes; {costs}")
    return 0


# Each subcommand's arguments as a table: (name or flag, add_argument's keywords).
_DATA_DIR = ("--data-dir", dict(default="data", help="root of the data tree (default: data)"))
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
    ("--plan-id", dict(default=None, help="names the plan and its clusters: 1-8 lower-case letters or digits (default: 4 random hex)")),
    ("--force", dict(action="store_true", help="write into a --out folder that is not empty")),
    ("--bucket", dict(default=None, help="copy each pod's data to this bucket (survives --down)")),
    ("--store", dict(default="s3", choices=["s3", "gcs", "r2", "azure", "oci"], help="bucket kind")),
    ("--git-url", dict(default=None, help="clone this repository on the pod instead of syncing the checkout")),
    ("--git-ref", dict(default=None, help="with --git-url: the commit (manifests then show a clean tree)")),
    ("--allow-unpinned", dict(action="store_true",
                              help="plan for a stack with unpinned items (its `stack install` gets --allow-unpinned)")),
    ("--check", dict(action="store_true",
                     help="load every task with SkyPilot's own parser (offline; needs SkyPilot: make sky-env)")),
    ("--sky-python", dict(default=None, help="interpreter with skypilot (default $OFFLOAD_LAB_SKY_PYTHON, else "
                                             ".venvs/sky/bin/python)")),
    _JSON,
]
_MERGE_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("plan_dir", dict(help="the folder `pod plan` wrote (with plan.json and <cluster>/data/)")),
    _DATA_DIR,
    ("--cost-report", dict(default=None, help="`sky cost-report -o json --days 0` saved to a file")),
    ("--partial", dict(action="store_true", help="merge the pods fetched so far")),
    _JSON,
]
_LEDGER_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("campaign", dict(help="campaign name, e.g. study-pod")), _DATA_DIR, _JSON]

_SUBCOMMANDS = [
    ("plan", cmd_pod_plan, _PLAN_ARGS,
     "write SkyPilot task YAML for a campaign (one per pod) and print the commands",
     "Resources come from the stack file's `pod:` section (accelerator, GPUs per node, nodes, disk); setup runs the "
     "README's install and `stack install`; run checks `nvidia-smi topo -m`, then runs the campaign or its part. "
     "--pods N spreads the experiments (or, for a campaign with repeat_boots, the boots) over N pods. Writes "
     "<out>/<cluster>.yaml and <out>/plan.json. Exit status 2 for a stack a launcher cannot express, a split the "
     "campaign cannot take, or a refused check."),
    ("merge", cmd_pod_merge, _MERGE_ARGS,
     "merge the pods' fetched data into one campaign; record what the launcher says they cost",
     "Check every run of every pod against its manifest, refuse run ids seen twice, then copy the runs and the "
     "pods' ledger lines into --data-dir. With --cost-report (`sky cost-report -o json --days 0`), one `pod` ledger "
     "line per cluster: start, end, minutes, price and cost, from the launcher where it gives them and from the "
     "stack file's price where it does not (`source`)."),
    ("ledger", cmd_pod_ledger, _LEDGER_ARGS,
     "the campaign's pods as the launcher reported them, with the price source",
     "Read the `pod` lines of <data>/<campaign>/ledger.jsonl: per cluster the paid minutes (launch to teardown, "
     "setup included), cost, where the price came from (launcher or stack_file) and the sessions it ran."),
]


def add_parsers(sub: Any) -> None:
    """Register ``pod plan``, ``pod merge`` and ``pod ledger``."""
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
