"""``offload-lab campaign rehearse FILE``: a pod campaign run here against an emulated pod (campaigns/rehearse.py)."""

from __future__ import annotations

import argparse
from typing import Any

from offload_lab.cli.common import print_json
from offload_lab.core.timescale import DEFAULT_TIME_SCALE


def cmd_campaign_rehearse(args: argparse.Namespace) -> int:
    from offload_lab.campaigns import rehearse

    res = rehearse.rehearse(args.file, data_root=args.data_dir, overrides_file=args.overrides,
                            pod_model=args.pod_model, paper=not args.no_paper, paper_out=args.out,
                            log=(lambda s: None) if args.json else print, time_scale_factor=args.time_scale)
    rec = res.record
    if args.json:
        print_json({"campaign": res.campaign, "run": str(res.run), "record": rec,
                    "paper": {k: str(v) for k, v in res.paper.outputs().items()} if res.paper else None,
                    "would_fail": res.failures})
    else:
        print(summary(res))
    # 4, as for a campaign with a failed notebook: a step that would fail on the pod.
    return 4 if any(f.get("level") == "error" for f in res.failures) else 0


def summary(res: Any) -> str:
    """The rehearsal in a few lines: outcomes, minutes and cost on the real pod, and every step that would fail."""
    rec = res.record
    cost = rec["cost"]
    lines = [f"rehearsal of {rec['campaign']} against the emulated pod {rec['pod_model']['file']} "
             f"({'shortened' if rec['shortened'] else 'as written'}, time scale {rec['time_scale']:g}): "
             f"{rec['seconds'] / 60:.1f} min here; runs in {res.data_root / res.campaign}",
             f"{'experiment':16} {'outcome':8} {'here min':>8} {'+ model':>8} {'pod min':>8} {'cost':>8}"]
    for r in rec["experiments"]:
        here = f"{r['seconds'] / 60:.1f}" if r["seconds"] is not None else "-"
        pod = f"{r['predicted_minutes']:.1f}" if r["predicted_minutes"] is not None else "-"
        eur = f"{r['predicted_cost']:.2f}" if r["predicted_cost"] is not None else "-"
        lines.append(f"{r['experiment']:16} {r['outcome']:8} {here:>8} {r['added_seconds'] / 60:>8.1f} {pod:>8} {eur:>8}")
    if cost["predicted_cost"] is not None:
        lines.append(f"on the real pod: {cost['predicted_minutes']:.0f} min, {cost['predicted_cost']:.2f} "
                     f"{cost['currency']} at {cost['per_hour']:g} {cost['currency']}/h ({cost['left_out']} left out)")
    for b in rec["boots"]:
        lines.append(f"boot {b['boot']}: {b['outcome']}" + ("" if b.get("as_expected") in (None, True)
                                                           else f" (expected {b['expected']})"))
    errors = [f for f in res.failures if f.get("level") == "error"]
    lines.append(f"{len(errors)} step(s) would fail" + (":" if errors else ""))
    for f in errors:
        lines.append(f"  - {f.get('step')}: {f.get('item', '') + ': ' if f.get('item') else ''}{f.get('message')}")
    others = [f for f in res.failures if f.get("level") != "error"]
    if others:
        lines.append(f"{len(others)} warning(s) or unpinned item(s) (rehearsal.json, would_fail.csv)")
    if res.paper is not None:
        lines.append("paper: " + ", ".join(str(p) for p in res.paper.outputs().values()))
    return "\n".join(lines)


def add_parser(csub: Any) -> None:
    p = csub.add_parser(
        "rehearse", help="run a pod campaign here against an emulated pod: what would fail, what it would cost",
        description="Run the campaign's notebooks, load generator, boots and paper build on this machine against an "
                    "emulated pod (a real OpenAI-compatible server timed by a pod model file, configs/pods/), after "
                    "dry runs of every stack's install and plan steps. Prints each experiment's outcome, the minutes "
                    "and cost it predicts on the real pod (the rehearsal's durations scaled by the pod model, times "
                    "the stack's price) and every step that would fail; exit 4 when one would. Runs go to "
                    "<data-dir>/<name>-rehearsal/, never into the pod campaign's data; the paper says on its first "
                    "page that it is a rehearsal and names the pod model (docs/rehearsal.md).")
    p.add_argument("file", help="pod campaign file, e.g. configs/campaigns/study-pod.yaml")
    p.add_argument("--overrides", default=None,
                   help="file of overrides that shortens the campaign (configs/rehearsals/*.yaml)")
    p.add_argument("--pod-model", default=None,
                   help="pod model file (default: the overrides file's, else configs/pods/study-published.yaml)")
    p.add_argument("--data-dir", default="data/rehearsals", help="data root of the rehearsal (default: data/rehearsals)")
    p.add_argument("--out", default=None, help="where the paper goes (default: _output/<rehearsal campaign>/)")
    p.add_argument("--no-paper", action="store_true", help="do not build the paper")
    p.add_argument("--json", action="store_true", help="print the rehearsal's record as JSON")
    p.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE,
                   help="serve TTFTs and TPOTs above their floors (set from the newest clock check's measured "
                        "client error) this many times faster, and convert every figure set against the pod back "
                        "(default: %(default)g; 1 is real time; docs/rehearsal.md)")
    p.set_defaults(func=cmd_campaign_rehearse)
