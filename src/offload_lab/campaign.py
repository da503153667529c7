"""Campaigns: which experiments run, with which parameters, against which stack, executed through papermill.

A campaign file (``configs/campaigns/*.yaml``) lists notebooks and their parameters. The runner checks everything it
can before it starts a server (files exist, every parameter is declared by its notebook), then, for each experiment,
creates a run directory, executes the notebook into it, and finishes the run's manifest. A notebook that fails
leaves its run marked ``failed`` with the output notebook kept, and stops the campaign with a non-zero exit.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import environment, load, runs, stack as stackmod
from .errors import InputError, ProducerError

# Parameters the runner fills in itself; a notebook run by the campaign must declare them.
RUNNER_PARAMETERS = ("base_url", "run_dir", "campaign", "data_root")
OUTPUT_NOTEBOOK = "notebook.ipynb"


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: str = Field(description="experiment name: the run directory's parent")
    notebook: str = Field(description="notebook path, relative to the repository root")
    parameters: dict[str, Any] = Field(default_factory=dict)
    needs_server: bool = Field(True, description="false for analysis notebooks that only read data files")


class CampaignFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    stack: str | None = Field(default=None, description="stack file the campaign's server starts from")
    experiments: list[ExperimentSpec] = Field(min_length=1)


@dataclass
class Campaign:
    spec: CampaignFile
    file: Path
    root: Path

    def notebook_path(self, exp: ExperimentSpec) -> Path:
        p = Path(exp.notebook)
        return p if p.is_absolute() else self.root / p


@dataclass
class CampaignResult:
    campaign: str
    runs: list[Path] = field(default_factory=list)
    boot_run: Path | None = None
    seconds: float = 0.0


def load_campaign(path: Path | str, root: Path | None = None) -> Campaign:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"campaign file {path} does not exist; the embedded one is configs/campaigns/embedded.yaml")
    try:
        spec = CampaignFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as e:
        raise InputError(f"campaign file {path} is not valid YAML: {e}") from e
    except ValidationError as e:
        details = "\n".join(f"  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise InputError(f"campaign file {path} is not a valid campaign file:\n{details}") from e
    runs.check_name("campaign", spec.name)
    return Campaign(spec=spec, file=path.resolve(), root=root or stackmod.find_root(path.resolve().parent))


def declared_parameters(notebook: Path) -> dict[str, Any]:
    import papermill

    return papermill.inspect_notebook(str(notebook))


def validate(campaign: Campaign) -> None:
    """Every notebook exists and declares every parameter it will be given; raise InputError naming the first miss."""
    for exp in campaign.spec.experiments:
        runs.check_name("experiment", exp.experiment)
        nb = campaign.notebook_path(exp)
        if not nb.is_file():
            raise InputError(f"campaign file {campaign.file}: notebook {exp.notebook} (experiment "
                             f"{exp.experiment}) does not exist")
        declared = declared_parameters(nb)
        if not declared:
            raise InputError(f"notebook {exp.notebook} has no cell tagged 'parameters'; papermill needs one")
        given = set(exp.parameters) | set(RUNNER_PARAMETERS)
        unknown = sorted(given - set(declared))
        if unknown:
            raise InputError(
                f"campaign file {campaign.file}: experiment {exp.experiment} passes parameter(s) {unknown} that "
                f"notebook {exp.notebook} does not declare (it declares {sorted(declared)})"
            )


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], cwd: Path) -> None:
    """Run a notebook with papermill; raise ProducerError on a failed cell, naming the cell and the error."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name="python3", cwd=str(cwd),
            progress_bar=False, log_output=False, request_save_on_cell_execute=True,
        )
    except PapermillExecutionError as e:
        raise ProducerError(
            f"notebook {notebook.name} failed in cell {e.cell_index} ({e.ename}: {e.evalue}); "
            f"the output notebook is kept at {output}"
        ) from e
    nb = nbformat.read(str(output), as_version=4)
    # Some failures are recorded only in the metadata (papermill #786): check it as well as the cells.
    exc = nb.metadata.get("papermill", {}).get("exception")
    errors = [c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    if exc or errors:
        raise ProducerError(f"notebook {notebook.name} recorded an error; the output notebook is at {output}")


@contextlib.contextmanager
def _server_for(campaign: Campaign, data_root: Path, url: str | None, port: int | None) -> Iterator[dict[str, Any]]:
    if url:
        load.check_reachable(url)
        yield {"url": url, "boot_run": None, "command": None, "stack": None}
        return
    if not campaign.spec.stack:
        raise InputError(f"campaign file {campaign.file} names no stack; add `stack:` or pass --url")
    st = stackmod.load_stack(campaign.root / campaign.spec.stack, root=campaign.root)
    with stackmod.serving(st, data_root, campaign.spec.name, port=port) as server:
        yield {
            "url": server.url,
            "boot_run": str(server.run.path),
            "command": server.command,
            "stack": st.record(),
            "model": server.model_name,
        }


def run_campaign(
    path: Path | str,
    data_root: Path | str = "data",
    url: str | None = None,
    port: int | None = None,
    only: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> CampaignResult:
    """Run a campaign's experiments in order; see the module docstring."""
    started = time.monotonic()
    campaign = load_campaign(path)
    data_root = Path(data_root)
    if not data_root.is_absolute():
        data_root = campaign.root / data_root
    validate(campaign)
    experiments = [e for e in campaign.spec.experiments if not only or e.experiment in only]
    if only and len(experiments) != len(set(only)):
        known = [e.experiment for e in campaign.spec.experiments]
        raise InputError(f"--only names experiments not in {campaign.file}: {sorted(set(only) - set(known))}")
    result = CampaignResult(campaign=campaign.spec.name)
    env = environment.capture_environment()
    needs_server = any(e.needs_server for e in experiments)
    server_ctx = _server_for(campaign, data_root, url, port) if needs_server else contextlib.nullcontext({})
    with server_ctx as server:
        if server.get("boot_run"):
            result.boot_run = Path(server["boot_run"])
            log(f"server ready at {server['url']} (boot run {result.boot_run})")
        for exp in experiments:
            result.runs.append(_run_one(campaign, exp, data_root, server, env, log))
    result.seconds = time.monotonic() - started
    return result


def _run_one(campaign: Campaign, exp: ExperimentSpec, data_root: Path, server: dict[str, Any],
             env: dict[str, Any], log: Callable[[str], None]) -> Path:
    nb = campaign.notebook_path(exp)
    run = runs.new_run(
        data_root, campaign.spec.name, exp.experiment, exp.parameters,
        environment=env,
        notebook={"path": str(nb.relative_to(campaign.root)) if nb.is_relative_to(campaign.root) else str(nb),
                  "sha256": runs.sha256_file(nb), "output": OUTPUT_NOTEBOOK},
        campaign_file={"path": str(campaign.file), "sha256": runs.sha256_file(campaign.file)},
        server={k: v for k, v in server.items() if k != "stack"},
        stack=server.get("stack"),
    )
    log(f"running {exp.experiment} ({exp.notebook}) into {run.path}")
    params = {**exp.parameters, "base_url": server.get("url"), "run_dir": str(run.path),
              "campaign": campaign.spec.name, "data_root": str(data_root)}
    try:
        execute_notebook(nb, run.file(OUTPUT_NOTEBOOK), params, cwd=campaign.root)
    except BaseException as e:
        outcome = "stopped" if isinstance(e, KeyboardInterrupt) else "failed"
        run.finish(outcome, error=str(e))
        raise
    run.finish("ok")
    return run.path
