"""``offload-lab report``: its parameters (the flags come from :class:`ReportParams`) and the work, one call:
:func:`write_report` checks the places, builds the page (:mod:`offload_lab.paper.report`), writes it, and with
``vllm_json`` every load level as ``vllm bench serve`` saves its results (docs/report.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from offload_lab.core.commands import Params, data_dir_field
from offload_lab.core.errors import InputError


class ReportParams(Params):
    campaign: str = Field(description="the campaign whose runs to report (a folder under --data-dir)")
    data_dir: str = data_dir_field()
    out: str | None = Field(None, description="the HTML file to write (default: CAMPAIGN-report.html here)")
    experiment: list[str] = Field(default_factory=list, description="report only these experiments (default: all)")
    vllm_json: str | None = Field(None, description="also write each load level as `vllm bench serve` saves it, one "
                                                    "JSON file each, into this folder")


@dataclass
class Written:
    path: Path
    bytes: int
    report: Any  # paper.report.Report
    vllm_files: list[Path] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """What --json prints."""
        r = self.report
        return {"path": str(self.path), "bytes": self.bytes, "charts": r.charts, "tables": r.tables,
                "experiments": r.experiments, "seconds": round(r.seconds, 1)}


def write_report(p: ReportParams) -> Written:
    from offload_lab.core import paths, runs
    from offload_lab.core.places import check_output
    from offload_lab.paper import report

    runs.check_name("campaign", p.campaign)
    data_root = paths.data_root(p.data_dir)
    if not (data_root / p.campaign).is_dir():
        raise InputError(f"campaign {p.campaign!r}: no folder {data_root / p.campaign}; give a campaign that "
                         "has runs there (`offload-lab runs list --campaign NAME`), or its --data-dir")
    out = Path(p.out) if p.out else Path(p.campaign + report.REPORT_SUFFIX)
    # A report is not data: inside the data tree it would read as a corrupt run.
    outside = {"the data tree (--data-dir)": data_root}
    check_output(out, "--out", "file", outside=outside)
    folder = check_output(p.vllm_json, "--vllm-json", "dir", outside=outside) if p.vllm_json else None
    result = report.build(p.campaign, data_root, experiments=p.experiment or None)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs.atomic_write_text(out, result.html)
    os.chmod(out, 0o644)  # a page to share, not a secret (the atomic write's temporary file is private)
    written = Written(out, out.stat().st_size, result)
    if folder is not None:
        written.vllm_files = vllm_json(p, data_root, folder)
    return written


def vllm_json(p: ReportParams, data_root: Path, folder: Path) -> list[Path]:
    """Every load level of the campaign's runs as `vllm bench serve --save-result --save-detailed` writes it."""
    from offload_lab.core import runs
    from offload_lab.load import vllm_result

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for run_dir in runs.iter_runs(data_root, p.campaign):
        manifest = runs.load_manifest(run_dir)
        if manifest.get("outcome") == "running" or (p.experiment and manifest.get("experiment") not in p.experiment):
            continue
        for name, result in vllm_result.run_results(run_dir).items():
            runs.atomic_write_json(folder / name, result)
            written.append(folder / name)
    return written


def summary(w: Written, campaign: str, vllm_folder: str | None) -> list[str]:
    """The lines the command prints."""
    r = w.report

    def n(k: int, word: str) -> str:
        return f"{k} {word}{'s' if k != 1 else ''}"

    lines = [f"report of campaign {campaign}: {n(len(r.experiments), 'experiment')}, {n(r.charts, 'chart')}, "
             f"{n(r.tables, 'table')}, {w.bytes / 1e6:.1f} MB, built in {r.seconds:.1f} s",
             f"open {w.path.resolve().as_uri()} (self-contained: works offline)"]
    if vllm_folder:
        lines.append(f"{n(len(w.vllm_files), 'load level')} in vllm bench serve's result JSON under {vllm_folder}")
    return lines
