"""What the command line asks of the core: the parameters of ``runs list``, ``runs verify`` and ``env`` (their flags
come from these models, through ``cli/model_options.py``), the fields many commands share, and the work itself, so
that it is tested without the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from offload_lab.core import runs
from offload_lab.core.errors import InputError
from offload_lab.core.outcome import Outcome
from offload_lab.core.paths import DATA_DIR

DATA_DIR_HELP = "root of the data tree"
CAMPAIGN_HELP = "campaign name (a directory under the data root)"


def data_dir_field() -> Any:
    """The data root of every command: one name (``--data-dir``), one default, one help."""
    return Field(DATA_DIR, description=DATA_DIR_HELP)


class Params(BaseModel):
    """A command's parameters: unknown keys refused, so a flag renamed in one place is never silently dropped."""

    model_config = ConfigDict(extra="forbid")


class RunsListParams(Params):
    campaign: str = Field(description=CAMPAIGN_HELP)
    experiment: str | None = Field(None, description="only this experiment")
    data_dir: str = data_dir_field()


class RunsVerifyParams(Params):
    run_dirs: list[str] = Field(description="run directories")


class EnvParams(Params):
    all_packages: bool = Field(False, description="list every installed package, not only key ones")


def list_runs(p: RunsListParams) -> list[dict[str, Any]]:
    """One row per run of a campaign: where, which experiment, its outcome and start, and a damaged manifest."""
    rows = []
    for row in runs.scan_runs(Path(p.data_dir), p.campaign, p.experiment):
        m = row.manifest or {}
        rows.append({"run": str(row.path), "experiment": m.get("experiment", row.path.parent.name),
                     "outcome": row.status, "started_at": m.get("started_at"), "problem": row.problem})
    return rows


def verify_runs(run_dirs: list[str]) -> list[dict[str, Any]]:
    """Each run's outcome and every file missing, changed or added since it ended; ``unreadable`` for a directory
    that is not a readable run."""
    out = []
    for d in run_dirs:
        try:
            m = runs.load_manifest(Path(d))
            problems = runs.verify_run(Path(d))
        except InputError as e:
            out.append({"run": d, "status": runs.CORRUPT, "unreadable": str(e), "problems": [], "error": None})
            continue
        out.append({"run": d, "status": runs.run_status(m), "unreadable": None, "problems": list(problems),
                    "error": m.get("error")})
    return out


def runs_list(p: RunsListParams) -> Outcome:
    """:func:`list_runs` as ``runs list`` shows it; exit 2 when a run's manifest is damaged."""
    rows = list_runs(p)
    lines: list[str] = []
    write = lines.append
    for r in rows:
        write(f"{r['outcome']:9} {r['started_at'] or '-':27}  {r['run']}"
              + (f"\n          {r['problem']}" if r["problem"] else ""))
    if not rows:
        write(f"no runs under {Path(p.data_dir) / p.campaign}")
    # A damaged manifest is a bad input for whoever reads this campaign: say so in the exit status too.
    return Outcome(rows, lines, 2 if any(r["problem"] for r in rows) else 0)
