"""What the command line asks of the paper: the parameters of ``paper build|prepare|audit`` (their flags come from
these models through ``cli/model_options.py``) and the build's checks of where it writes, tested without the
command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import Field

from offload_lab.core.commands import DATA_DIR_HELP, Params, data_dir_field

HAND_RUN_HELP = ("also read this run made by hand (outside `campaign run`; `all`: every one), marked \"by hand\" "
                 "in the paper; repeatable")
ROOT_HELP = "repository root holding paper/ and _quarto.yml (default: found)"


class PaperBuildParams(Params):
    campaign: str = Field("embedded", description="campaign whose data the paper reads")
    data_dir: str = data_dir_field()
    out: str | None = Field(None, description="output directory (default: _output/<campaign>)")
    root: str | None = Field(None, description=ROOT_HELP)
    hand_run: list[str] | None = Field(None, description=HAND_RUN_HELP)
    frozen: bool = Field(False, description="also check every file the paper reads against its committed version "
                                            "in git (for a release)")
    bundle: str | None = Field(None, description="also write this folder: the HTML paper with every data file and "
                                                 "notebook it links to, links relative")


class PaperPrepareParams(Params):
    campaign: str | None = Field(None, description="campaign (default: $OFFLOAD_LAB_CAMPAIGN, else the one paper.qmd "
                                                   "names)")
    data_dir: str | None = Field(None, description=DATA_DIR_HELP + " (default: $OFFLOAD_LAB_DATA_ROOT, else data)")
    out: str | None = Field(None, description="output directory (default: paper/_generated)")
    hand_run: list[str] | None = Field(None, description=HAND_RUN_HELP)
    root: str | None = Field(None, description=ROOT_HELP)


class PaperAuditParams(Params):
    claims: str | None = Field(None, description="claims.json (default: the one prepare wrote)")
    pdf: str | None = Field(None, description="rendered PDF (default: Quarto's _manuscript/paper/paper.pdf)")
    html: str | None = Field(None, description="rendered HTML (default: Quarto's _manuscript/paper/index.html)")
    root: str | None = Field(None, description="repository root (default: found)")


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def ask_hand_runs(hand_run: list[str] | None) -> None:
    """--hand-run goes to the selection through the environment, so that Quarto's own hooks read the same runs."""
    from offload_lab.paper.selection import HAND_RUNS_ENV

    if hand_run:
        os.environ[HAND_RUNS_ENV] = ",".join(hand_run)


def build(p: PaperBuildParams) -> tuple[Any, list[dict[str, Any]]]:
    """Build the paper; returns the result and the runs passed over (their parameters are not the campaign file's, or
    their manifest cannot be read)."""
    from offload_lab.core import paths
    from offload_lab.core.places import check_output
    from offload_lab.paper import build as paper

    ask_hand_runs(p.hand_run)
    # A relative --data-dir is the repository's (as for `campaign run`), so a build from a subdirectory reads the
    # data the campaign wrote.
    data_root = paths.data_root(p.data_dir)
    # The paper's outputs are not data: inside the data tree they would read as corrupt runs; the PDF and the
    # bundle written over each other would leave neither whole.
    for flag, place, other in (("--out", p.out, ("--bundle", p.bundle)), ("--bundle", p.bundle, ("--out", p.out))):
        if place is not None:
            check_output(place, flag, "dir", outside={"the data tree (--data-dir)": data_root}, others=dict([other]))
    result = paper.build_paper(campaign=p.campaign, data_root=data_root, out_dir=_path(p.out),
                               repo_root=_path(p.root), frozen=p.frozen, bundle=_path(p.bundle))
    skipped = json.loads(result.claims_json.read_text(encoding="utf-8")).get("skipped") or []
    return result, skipped


def prepare(p: PaperPrepareParams) -> str:
    """Quarto's pre-render hook: the line to print (skipped, or where it wrote)."""
    from offload_lab.paper import build as paper

    if skipped := paper.hook_skipped("prepare", _path(p.out), p.root):
        return skipped
    ask_hand_runs(p.hand_run)
    written = paper.prepare(campaign=p.campaign, data_root=_path(p.data_dir), out_dir=_path(p.out),
                            repo_root=_path(p.root))
    return f"claims and figures written to {written}"


def audit(p: PaperAuditParams) -> str:
    """Quarto's post-render hook: the line to print (skipped, or what passed)."""
    from offload_lab.paper import build as paper

    if not (p.claims or p.pdf or p.html) and (skipped := paper.hook_skipped("audit")):
        return skipped
    report = paper.audit(claims_json=_path(p.claims), pdf=_path(p.pdf), html=_path(p.html), repo_root=_path(p.root))
    return "audit passed: " + ", ".join(report.checked)
