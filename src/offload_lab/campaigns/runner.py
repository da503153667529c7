"""Campaigns: which experiments run, with which parameters, against which stack, executed through papermill.

A campaign file (``configs/campaigns/*.yaml``) lists notebooks and their parameters. The runner checks everything it
can before it starts a server (files exist, every parameter is declared by its notebook, every stack file and
variant is valid), then:

1. opens a session in the campaign's ledger (:mod:`offload_lab.campaigns.ledger`: pod, start, end, minutes, cost);
2. checks the GPU topology (``nvidia-smi topo -m``): GPUs on different NUMA nodes (``SYS``) stop the campaign or only
   mark its runs, as the file's ``topology.on_cross_socket`` says; every manifest carries the matrix and the verdict;
3. runs the ``boots`` section: each listed boot attempt (a stack and a variant: another plan, other flags) is started,
   probed, classified and stopped: a failed boot is data, not an error;
4. runs the experiments: for each, a new run directory, the notebook executed into it, the manifest finished.
   Experiments that name a variant (``stack:``, ``override:``) get their own server; consecutive experiments on the
   same variant share one. With ``repeat_boots: k`` the server is booted k times and every server experiment runs
   after each boot (manifests say which boot); notebooks that need no server run once, after the last boot.

A notebook that fails leaves its run marked ``failed`` with the output notebook kept, and stops the campaign with a
non-zero exit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.server import boots as bootsmod
from offload_lab.core import environment
from offload_lab.campaigns import ledger
from offload_lab.campaigns.execute import execute_notebook, executed_cells
from offload_lab.campaigns.progress import Progress
from offload_lab.campaigns.servers import Servers, run_boot_attempts  # noqa: F401  (run_boot_attempts: callers)
from offload_lab.core import inputs, paths, runs, signals
from offload_lab.server import stack as stackmod
from offload_lab.core.errors import InputError
from offload_lab.server.spec import StackOverride
from offload_lab.experiments.notebook import RUNNER_PARAMETERS, has_params_model, kind_of_notebook, validate_params

OUTPUT_NOTEBOOK = "notebook.ipynb"
BOOTS = "boots"


class ExperimentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: str = Field(description="experiment name: the run directory's parent")
    notebook: str = Field(description="notebook path, relative to the repository root; its name without .ipynb is "
                                      "the experiment's folder in offload_lab/experiments/, whose Params model "
                                      "validates the parameters")
    parameters: dict[str, Any] = Field(default_factory=dict)
    needs_server: bool = Field(True, description="false for analysis notebooks that only read data files")
    stack: str | None = Field(None, description="another stack file for this experiment's server")
    override: StackOverride | None = Field(None, description="a variant of the stack for this experiment's server")
    variant: str | None = Field(None, description="a name for the variant, recorded in manifests")


class TopologyPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    on_cross_socket: Literal["stop", "mark"] = Field(
        "mark", description="GPUs on different NUMA nodes (SYS in nvidia-smi topo -m): stop the campaign before "
                            "anything runs, or run and mark every manifest")
    expect_gpus: int | None = Field(None, ge=0, description="stop when the machine has another number of GPUs")


class BootSpec(BaseModel):
    """One boot attempt of the ``boots`` section: started, probed, classified, stopped."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    stack: str | None = Field(None, description="stack file (default: the campaign's)")
    override: StackOverride = Field(default_factory=StackOverride)
    expect: str | None = Field(None, description="the outcome expected, e.g. the published one")
    expect_source: str | None = Field(None, description="where the expectation comes from")
    ready_timeout_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _known_outcome(self) -> "BootSpec":
        if self.expect is not None and self.expect not in bootsmod.OUTCOMES:
            raise ValueError(f"boot {self.name}: expect {self.expect!r} is not one of {list(bootsmod.OUTCOMES)}")
        return self


class CampaignFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    stack: str | None = Field(default=None, description="stack file the campaign's server starts from")
    topology: TopologyPolicy = Field(default_factory=TopologyPolicy)
    repeat_boots: int = Field(1, ge=1, description="boot the server this many times; run the experiments after each")
    boots: list[BootSpec] = Field(default_factory=list)
    ledger: bool = Field(True, description="write a session to <data>/<campaign>/ledger.jsonl")
    experiments: list[ExperimentSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "CampaignFile":
        names = [b.name for b in self.boots]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"boot name(s) {dup} given twice")
        exps = [e.experiment for e in self.experiments]
        twice = sorted({n for n in exps if exps.count(n) > 1})
        if twice:
            raise ValueError(f"experiment name(s) {twice} given twice: each experiment's runs share one directory, so "
                             "give each entry a name of its own")
        if any(e.experiment == BOOTS for e in self.experiments):
            raise ValueError("experiment name 'boots' is the runner's own (server starts); list boot attempts "
                             "under `boots:`")
        return self


@dataclass
class Campaign:
    spec: CampaignFile
    file: Path
    root: Path

    def notebook_path(self, exp: ExperimentSpec) -> Path:
        p = Path(exp.notebook)
        return p if p.is_absolute() else self.root / p

    def stack_path(self, name: str | None) -> Path | None:
        name = name or self.spec.stack
        if not name:
            return None
        p = Path(name)
        return p if p.is_absolute() else self.root / p


@dataclass
class CampaignResult:
    campaign: str
    runs: list[Path] = field(default_factory=list)
    boot_run: Path | None = None
    boot_runs: list[Path] = field(default_factory=list)
    boot_attempts: list[dict[str, Any]] = field(default_factory=list)
    session: str | None = None
    topology: dict[str, Any] | None = None
    seconds: float = 0.0
    data_root: Path | None = None  # where the runs went (relative --data-dir is taken from the repository root)


def load_campaign(path: Path | str, root: Path | None = None) -> Campaign:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"campaign file {path} does not exist; the embedded one is configs/campaigns/embedded.yaml")
    # Bounded, UTF-8, valid YAML, a mapping: each refusal names the file (core.inputs).
    data = inputs.read_yaml(path, "campaign file")
    try:
        spec = CampaignFile.model_validate(data)
    except ValidationError as e:
        details = "\n".join(f"  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise InputError(f"campaign file {path} is not a valid campaign file:\n{details}") from e
    runs.check_name("campaign", spec.name)
    return Campaign(spec=spec, file=path.resolve(), root=root or paths.find_root(path.resolve().parent))


def declared_parameters(notebook: Path) -> dict[str, Any]:
    import papermill

    inputs.read_text(notebook, "notebook", inputs.DATA_MAX_BYTES)  # UTF-8 and bounded, named if not
    try:
        return papermill.inspect_notebook(str(notebook))
    except Exception as e:  # nbformat's and papermill's own errors: not JSON, not a notebook, an old version
        raise InputError(f"notebook {notebook} is not a Jupyter notebook papermill can read ({type(e).__name__}: "
                         f"{str(e)[:200]}); give the campaign a .ipynb file") from e


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
        experiment_params(campaign, exp)
    _validate_stacks(campaign)


def experiment_params(campaign: Campaign, exp: ExperimentSpec) -> dict[str, Any]:
    """The experiment's parameters as its Params model validates them: what manifests record and claims read."""
    kind = kind_of_notebook(exp.notebook)
    if not has_params_model(kind):
        return dict(exp.parameters)
    where = f"campaign file {campaign.file}, experiment {exp.experiment}"
    return validate_params(kind, exp.parameters, where).model_dump(mode="json")


def _validate_stacks(campaign: Campaign) -> None:
    """Every stack file the campaign names loads, and every variant of it is a valid stack file."""
    spec = campaign.spec
    wants: list[tuple[str, str | None, StackOverride | None]] = []
    if spec.stack:
        wants.append(("the campaign", spec.stack, None))
    for b in spec.boots:
        wants.append((f"boot {b.name}", b.stack, b.override))
    for e in spec.experiments:
        if e.needs_server and (e.stack or e.override):
            wants.append((f"experiment {e.experiment}", e.stack, e.override))
    if spec.repeat_boots > 1 and not spec.stack:
        raise InputError(f"campaign file {campaign.file}: repeat_boots needs a stack to boot")
    for who, name, override in wants:
        path = campaign.stack_path(name)
        if path is None:
            raise InputError(f"campaign file {campaign.file}: {who} needs a stack and the campaign names none")
        try:
            st = stackmod.load_stack(path, root=campaign.root)
            st.with_override(override)
        except InputError as e:
            raise InputError(f"campaign file {campaign.file}: {who}: {e}") from e


def topology_check(policy: TopologyPolicy, env: dict[str, Any]) -> dict[str, Any]:
    """The topology verdict every manifest carries; raises InputError when the policy says stop."""
    gpu = env.get("gpu") or {}
    topo = gpu.get("topology")
    count = len(gpu.get("gpus") or [])
    check: dict[str, Any] = {
        "policy": policy.on_cross_socket,
        "gpus": count,
        "checked": topo is not None,
        "crosses_sockets": topo.get("crosses_sockets") if topo else None,
        "sys_pairs": environment.cross_socket_pairs(topo) if topo else [],
        "reason": None if topo is not None else (gpu.get("reason") or "nvidia-smi topo -m gave no matrix"),
    }
    if policy.expect_gpus is not None and count != policy.expect_gpus:
        raise InputError(f"the campaign expects {policy.expect_gpus} GPU(s) and this machine has {count} "
                         f"(nvidia-smi); run it on the machine it was written for")
    if check["crosses_sockets"] and policy.on_cross_socket == "stop":
        pairs = ", ".join("-".join(p) for p in check["sys_pairs"])
        raise InputError(
            f"GPUs {pairs} are on different NUMA nodes (SYS in `nvidia-smi topo -m`), and the campaign file says "
            "topology.on_cross_socket: stop (the study measured 1.17 to 1.51 times the time per token on such a "
            "pod). Use a pod with all GPUs on one socket, or set on_cross_socket: mark to run and mark the runs"
        )
    check["marked"] = bool(check["crosses_sockets"])
    return check


def run_campaign(
    path: Path | str | Campaign,
    data_root: Path | str = "data",
    url: str | None = None,
    port: int | None = None,
    only: list[str] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> CampaignResult:
    """Run a campaign's boot attempts and experiments; see the module docstring. ``progress`` shows experiments,
    cells and the notebooks' counts as they run (its ``log`` replaces ``log``)."""
    started = time.monotonic()
    if log is None:
        log = progress.log if progress is not None else print
    # A caller that already read the file (the CLI, to size its display) hands it over: it is parsed once.
    campaign = path if isinstance(path, Campaign) else load_campaign(path)
    data_root = Path(data_root)
    if not data_root.is_absolute():
        data_root = campaign.root / data_root
    validate(campaign)
    spec = campaign.spec
    known = [e.experiment for e in spec.experiments] + ([BOOTS] if spec.boots else [])
    if only and set(only) - set(known):
        raise InputError(f"--only names experiments not in {campaign.file}: {sorted(set(only) - set(known))} "
                         f"(it has {known})")
    experiments = [e for e in spec.experiments if not only or e.experiment in only]
    do_boots = bool(spec.boots) and (not only or BOOTS in only)
    if url and spec.repeat_boots > 1:
        raise InputError("repeat_boots needs the campaign to start its own server; leave out --url")
    if url and do_boots:
        log("boot attempts skipped: --url uses a server that is already running")
        do_boots = False
    result = CampaignResult(campaign=spec.name, data_root=data_root)
    env = environment.capture_environment()
    session = None
    if spec.ledger:
        session = ledger.start_session(
            data_root, spec.name, env, _price(campaign),
            campaign_file={"path": str(campaign.file), "sha256": runs.sha256_file(campaign.file)},
            only=only, url=url is not None,
        )
        result.session = session.id
    outcome, error = "failed", None
    try:
        with signals.stopping_on_signals():
            _run_session(campaign, experiments, data_root, url, port, env, do_boots, log, result, progress)
        outcome = "ok"
    except BaseException as e:
        outcome = "stopped" if isinstance(e, (KeyboardInterrupt, _Refused)) else _outcome_of(e)
        error = signals.reason_of(e.__cause__ if isinstance(e, _Refused) else e)
        if isinstance(e, _Refused):
            raise e.__cause__ from None
        raise
    finally:
        result.seconds = time.monotonic() - started
        if session is not None:
            session.end(outcome, [str(r) for r in result.boot_runs + result.runs], error)
    return result


class _Refused(Exception):
    """The campaign's own topology rule refused to start: a stopped session, not a failed one."""


def _run_session(campaign: Campaign, experiments: list[ExperimentSpec], data_root: Path, url: str | None,
                 port: int | None, env: dict[str, Any], do_boots: bool, log: Callable[[str], None],
                 result: CampaignResult, progress: Progress | None = None) -> None:
    spec = campaign.spec
    try:
        result.topology = topology_check(spec.topology, env)
    except InputError as e:
        raise _Refused() from e  # refused by the campaign's own rule, before anything ran
    if result.topology["marked"]:
        log("marked: GPUs on different NUMA nodes (SYS); every manifest of this session says so")
    marks = {"session": result.session, "topology_check": result.topology}
    if do_boots:
        result.boot_attempts = run_boot_attempts(campaign, data_root, port, env, marks, log)
        result.boot_runs += [Path(r["run"]) for r in result.boot_attempts]
    _run_experiments(campaign, experiments, data_root, url, port, env, marks, log, result, progress)


def _price(campaign: Campaign) -> dict[str, Any] | None:
    path = campaign.stack_path(None)
    if path is None:
        return None
    st = stackmod.load_stack(path, root=campaign.root)
    return st.spec.price.model_dump() if st.spec.price else None


def _run_experiments(campaign: Campaign, experiments: list[ExperimentSpec], data_root: Path, url: str | None,
                     port: int | None, env: dict[str, Any], marks: dict[str, Any], log: Callable[[str], None],
                     result: CampaignResult, progress: Progress | None = None) -> None:
    k = campaign.spec.repeat_boots
    servers = Servers(campaign, data_root, url, port, env, marks, log)
    try:
        if k == 1:
            for exp in experiments:
                info = servers.get(exp, 0, 1) if exp.needs_server else servers.current()
                _run_one(campaign, exp, data_root, info, env, log, marks, (0, 1), result.runs, progress)
        else:
            for i in range(k):
                for exp in (e for e in experiments if e.needs_server):
                    info = servers.get(exp, i, k)
                    _run_one(campaign, exp, data_root, info, env, log, marks, (i, k), result.runs, progress)
                # The next round starts from a fresh boot, even on the same variant.
                servers.close()
            for exp in (e for e in experiments if not e.needs_server):
                _run_one(campaign, exp, data_root, {}, env, log, marks, (None, k), result.runs, progress)
    finally:
        servers.close()
        result.boot_runs += servers.boot_runs
        if servers.boot_runs:
            result.boot_run = servers.boot_runs[0]


def _run_one(campaign: Campaign, exp: ExperimentSpec, data_root: Path, server: dict[str, Any],
             env: dict[str, Any], log: Callable[[str], None], marks: dict[str, Any] | None = None,
             boot: tuple[int | None, int] = (0, 1), started: list[Path] | None = None,
             progress: Progress | None = None) -> Path:
    nb = campaign.notebook_path(exp)
    marks = marks or {}
    validated = experiment_params(campaign, exp)
    run = runs.new_run(
        data_root, campaign.spec.name, exp.experiment, validated,
        kind=kind_of_notebook(exp.notebook),
        environment=env,
        notebook={"path": str(nb.relative_to(campaign.root)) if nb.is_relative_to(campaign.root) else str(nb),
                  "sha256": runs.sha256_file(nb), "output": OUTPUT_NOTEBOOK},
        campaign_file={"path": str(campaign.file), "sha256": runs.sha256_file(campaign.file)},
        server={k: v for k, v in server.items() if k != "stack"},
        stack=server.get("stack"),
        boot={"index": boot[0], "of": boot[1], "run": server.get("boot_run")},
        host_load={"start": environment.host_load()},
        **marks,
    )
    if started is not None:
        started.append(run.path)  # listed before it runs: a run stopped half way is in the ledger too
    # Every parameter, validated, so that one the campaign file leaves out takes the model's default, never the
    # notebook's (whose parameters cell shows the embedded campaign's values).
    params = {**validated, "base_url": server.get("url"), "run_dir": str(run.path),
              "campaign": campaign.spec.name, "data_root": str(data_root)}
    if progress is not None:
        progress.experiment(exp.experiment, executed_cells(nb, params), detail=exp.notebook, run=str(run.path))
    else:
        log(f"running {exp.experiment} ({exp.notebook}) into {run.path}")
    sampler = environment.LoadSampler()
    try:
        with sampler:
            execute_notebook(nb, run.file(OUTPUT_NOTEBOOK), params, cwd=campaign.root, watcher=progress)
    except BaseException as e:
        _finish(run, _outcome_of(e), sampler, error=signals.reason_of(e))
        if progress is not None:
            progress.done(_outcome_of(e), signals.reason_of(e))
        raise
    _finish(run, "ok", sampler)
    if progress is not None:
        progress.done("ok")
    return run.path


def _finish(run: runs.Run, outcome: str, sampler: environment.LoadSampler, error: str | None = None) -> None:
    # How busy the machine was while the notebook measured: another server or test run on the same CPUs makes a
    # measurement incomparable, and the manifest should say so.
    current = _reload(run)
    load = dict(current.manifest.get("host_load") or {})
    load["end"] = environment.host_load()
    load["during"] = sampler.summary()
    current.finish(outcome, error=error, host_load=load)


def _reload(run: runs.Run) -> runs.Run:
    """The notebook may have added facts to the manifest (run.update); finish from what is on disk."""
    return runs.attach_run(run.path)


def _outcome_of(e: BaseException) -> str:
    # A sweep ended by its declared stop rule is a stopped run, not a broken notebook.
    cause = e.__cause__
    if isinstance(e, KeyboardInterrupt) or getattr(cause, "ename", None) == "SweepStopped":
        return "stopped"
    return "failed"
