"""``offload-lab report CAMPAIGN``: one self-contained interactive HTML file of every run of a campaign
(:mod:`offload_lab.paper.report`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from offload_lab.cli.common import DATA_DIR, DATA_DIR_HELP, print_json
from offload_lab.core.errors import InputError


def cmd_report(args: argparse.Namespace) -> int:
    from offload_lab.core import paths, runs
    from offload_lab.core.places import check_output
    from offload_lab.paper import report

    runs.check_name("campaign", args.campaign)
    data_root = paths.data_root(args.data_dir)
    if not (data_root / args.campaign).is_dir():
        raise InputError(f"campaign {args.campaign!r}: no folder {data_root / args.campaign}; give a campaign that "
                         "has runs there (`offload-lab runs list --campaign NAME`), or its --data-dir")
    out = Path(args.out) if args.out else Path(args.campaign + report.REPORT_SUFFIX)
    # A report is not data: inside the data tree it would read as a corrupt run.
    check_output(out, "--out", "file", outside={"the data tree (--data-dir)": data_root})
    result = report.build(args.campaign, data_root, experiments=args.experiment or None)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs.atomic_write_text(out, result.html)
    os.chmod(out, 0o644)  # a page to share, not a secret (the atomic write's temporary file is private)
    size = out.stat().st_size
    written = _vllm_json(args, data_root) if args.vllm_json else []
    if args.json:
        print_json({"path": str(out), "bytes": size, "charts": result.charts, "tables": result.tables,
                    "experiments": result.experiments, "seconds": round(result.seconds, 1)})
    else:
        print(f"report of campaign {args.campaign}: {len(result.experiments)} experiment"
              f"{'s' if len(result.experiments) != 1 else ''}, {result.charts} chart{'s' if result.charts != 1 else ''}"
              f", {result.tables} table{'s' if result.tables != 1 else ''}, {size / 1e6:.1f} MB, built in "
              f"{result.seconds:.1f} s")
        print(f"open {out.resolve().as_uri()} (self-contained: works offline)")
    if args.vllm_json:
        print(f"{len(written)} load level{'s' if len(written) != 1 else ''} in vllm bench serve's result JSON under "
              f"{args.vllm_json}")
    return 0


def _vllm_json(args: argparse.Namespace, data_root: Path) -> list[Path]:
    """Every load level of the campaign's runs as `vllm bench serve --save-result --save-detailed` writes it."""
    from offload_lab.core import runs
    from offload_lab.core.places import check_output
    from offload_lab.load import vllm_result

    folder = check_output(args.vllm_json, "--vllm-json", "dir", outside={"the data tree (--data-dir)": data_root})
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for run_dir in runs.iter_runs(data_root, args.campaign):
        manifest = runs.load_manifest(run_dir)
        if manifest.get("outcome") == "running" or (args.experiment and manifest.get("experiment")
                                                     not in args.experiment):
            continue
        for name, result in vllm_result.run_results(run_dir).items():
            runs.atomic_write_json(folder / name, result)
            written.append(folder / name)
    return written


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="write one self-contained interactive HTML report of a campaign's runs",
        description="One HTML file (charts with hover, tables that filter; opens offline) of every run of CAMPAIGN: "
                    "per experiment its runs named by the parameters in which they differ, latency per level (n, "
                    "mean, median, p95 from 20 samples, p99 from 100), distributions, total output tok/s and "
                    "requests/s beside tok/s per stream against the bar, TTFT against context and cache, boots, "
                    "quality deltas, and every other table. The numbers are read from the files the paper's claims "
                    "cite.")
    p.add_argument("campaign", help="the campaign whose runs to report (a folder under --data-dir)")
    p.add_argument("--data-dir", default=DATA_DIR, help=DATA_DIR_HELP)
    p.add_argument("--out", help="the HTML file to write (default: CAMPAIGN-report.html in the current folder)")
    p.add_argument("--experiment", action="append", metavar="NAME",
                   help="report only this experiment (repeatable; default: every one)")
    p.add_argument("--vllm-json", metavar="DIR",
                   help="also write every load level (one per regime and streams) as the JSON `vllm bench serve "
                        "--save-result --save-detailed` saves, one file each, into DIR (docs/report.md: the fields)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_report)
