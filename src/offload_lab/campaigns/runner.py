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

A notebook that fails (or is ended by its stop rule) leaves its run marked ``failed`` (``stopped``) with the output
notebook kept; a server that does not start fails the experiments on that variant. The campaign goes on with every
experiment that does not depend on a failed one (``after:`` and what the parameters read:
:mod:`offload_lab.campaigns.depends`), records the others as skipped, and ends by raising
:class:`~offload_lab.campaigns.depends.CampaignFailed` (exit 4) naming each failure and skip. ``fail_fast`` stops at the
first failure instead. A signal (Ctrl-C, SIGTERM, SIGHUP) always stops the whole campaign.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from offload_lab.server import boots as bootsmod
from offload_lab.core import environment
from offload_lab.campaigns import depends, ledger
from offload_lab.campaigns.depends import dependencies, experiment_params  # noqa: F401  (callers use both here)
from offload_lab.campaigns.execute import check_parameters_cells
from offload_lab.campaigns.progress import Progress
from offload_lab.campaigns.servers import Servers, run_boot_attempts  # noqa: F401  (run_boot_attempts: callers)
from offload_lab.campaigns.steps import BOOTS, OUTPUT_NOTEBOOK, Step, outcome_of  # noqa: F401  (OUTPUT_NOTEBOOK)
from offload_lab.core import inputs, paths, runs, signals
from offload_lab.core import progress as core_progress
from offload_lab.server import stack as stackmod
from offload_lab.core.errors import InputError
from offload_lab.core.places import kind_of
from offload_lab.server.spec import StackOverride
from offload_lab.experiments.notebook import OLD_URL_PARAMETER, RUNNER_PARAMETERS



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
    after: list[str] = Field(default_factory=list,
                             description="experiments of this file whose runs this one reads, beyond what its "
                                         "parameters say: it is skipped when one of them fails in the session")


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
    hand_runs: list[str] = Field(default_factory=list,
                                 description="runs made by hand (run ids, or `all`) that the campaign's paper reads "
                                             "beside its sessions' runs, marked \"by hand\" (paper.selection)")
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
        problem = depends.after_problem(exps, {e.experiment: e.after for e in self.experiments})
        if problem:
            raise ValueError(problem)
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
    # How each experiment ended, in the order they came up (skipped ones and servers that did not start included).
    outcomes: list[depends.ExperimentOutcome] = field(default_factory=list)
    boot_run: Path | None = None
    boot_runs: list[Path] = field(default_factory=list)
    boot_attempts: list[dict[str, Any]] = field(default_factory=list)
    session: str | None = None
    topology: dict[str, Any] | None = None
    seconds: float = 0.0
    data_root: Path | None = None  # where the runs went (relative --data-dir is taken from the repository root)

    @property
    def failures(self) -> list[depends.ExperimentOutcome]:
        return depends.failures(self.outcomes)

    @property
    def skipped(self) -> list[depends.ExperimentOutcome]:
        return depends.skips(self.outcomes)


def load_campaign(path: Path | str, root: Path | None = None) -> Campaign:
    path = Path(path)
    if kind_of(path) is None:  # anything else there is named for what it is by read_yaml
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


def validate(campaign: Campaign, show: bool = False, own_server: bool = True) -> None:
    """Every notebook exists and declares every parameter it will be given; raise InputError naming the first miss.

    ``show``: count the notebooks checked (core.progress); reading them all takes seconds. ``own_server``: the
    campaign starts its servers from its stacks (not `--url`), so their max_model_len holds the requests."""
    checked = core_progress.counting("checking the campaign", len(campaign.spec.experiments), "notebooks") \
        if show else None
    for exp in campaign.spec.experiments:
        runs.check_name("experiment", exp.experiment)
        nb = campaign.notebook_path(exp)
        if not nb.is_file():
            raise InputError(f"campaign file {campaign.file}: notebook {exp.notebook} (experiment "
                             f"{exp.experiment}) does not exist")
        declared = declared_parameters(nb)
        try:
            check_parameters_cells(nb)  # a copied parameters cell would override what the runner passes
        except InputError as e:
            raise InputError(f"campaign file {campaign.file}: experiment {exp.experiment}: {e}") from None
        if not declared:
            raise InputError(f"notebook {exp.notebook} has no cell tagged 'parameters'; papermill needs one")
        given = set(exp.parameters) | set(RUNNER_PARAMETERS)
        # A notebook written before issue 36 names the server's URL base_url; for one release the runner fills
        # both names in it (experiments.notebook.url_parameters), so its cell need not declare url.
        accepted = set(declared) | ({"url"} if OLD_URL_PARAMETER in declared else set())
        unknown = sorted(given - accepted)
        if unknown:
            raise InputError(
                f"campaign file {campaign.file}: experiment {exp.experiment} passes parameter(s) {unknown} that "
                f"notebook {exp.notebook} does not declare (it declares {sorted(declared)})"
            )
        experiment_params(campaign, exp)
        if checked is not None:
            checked.add()
    _hold_against_places(campaign, own_server)
    problem = depends.graph_problem([e.experiment for e in campaign.spec.experiments], dependencies(campaign))
    if problem is None:
        problem = depends.repeat_order_problem(campaign)
    if problem:
        raise InputError(f"campaign file {campaign.file}: {problem}")
    _validate_stacks(campaign)


def _hold_against_places(campaign: Campaign, own_server: bool = True) -> None:
    """Parameters held against what they name: the places (``place_problems``), the experiments whose runs they
    read (one of this campaign, or one with runs in the data tree), and the server's max_model_len (a request longer
    than it is refused by the server hours into a campaign)."""
    names = [e.experiment for e in campaign.spec.experiments]
    data = paths.data_root(root=campaign.root) / campaign.spec.name
    problems: list[str] = []
    for exp in campaign.spec.experiments:
        params = depends.params_model(campaign, exp)
        if params is None:
            continue
        where = f"experiment {exp.experiment}"
        place_problems = getattr(params, "place_problems", None)
        if callable(place_problems):
            problems += [f"{where}: {p}" for p in place_problems(campaign.root)]
        for read in depends.reads_experiments(params):
            if read not in names and not (data / read).is_dir():
                problems.append(f"{where} reads the runs of {read}, which is no experiment of this campaign and has "
                                f"no runs under {data}; name one of {names}")
        longest = getattr(params, "longest_request_tokens", None)
        # A server given by --url has its own max_model_len, which the experiment checks when it starts.
        limit = _max_model_len(campaign, exp) if own_server and exp.needs_server and callable(longest) else None
        if limit is not None and longest() > limit:
            problems.append(f"{where}: its longest request needs {longest():,} tokens (prompt and output), over the "
                            f"stack's max_model_len {limit:,}; shorten it (context_lengths, output_tokens) or raise "
                            "--max-model-len in the stack")
    if problems:
        raise InputError(f"campaign file {campaign.file}:\n" + "\n".join(f"  {p}" for p in problems))


def _max_model_len(campaign: Campaign, exp: ExperimentSpec) -> int | None:
    """The max_model_len the experiment's server starts with (its stack, variant applied), if the stack sets one."""
    path = campaign.stack_path(exp.stack or campaign.spec.stack)
    if path is None:
        return None
    try:
        st = stackmod.load_stack(path, root=campaign.root).with_override(exp.override)
    except InputError:
        return None  # _validate_stacks names it
    server = st.spec.server
    if server.flags.max_model_len is not None:
        return server.flags.max_model_len
    args = list(server.args)
    for i, a in enumerate(args):
        value = args[i + 1] if a == "--max-model-len" and i + 1 < len(args) else (
            a.split("=", 1)[1] if a.startswith("--max-model-len=") else None)
        if value is not None and value.isdigit():
            return int(value)
    return None


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


def topology_check(policy: TopologyPolicy, env: dict[str, Any], serves: bool = True) -> dict[str, Any]:
    """The topology verdict every manifest carries; raises InputError when the policy says stop. The GPU count and
    the cross-socket rule apply only where a server starts (``serves``): analysis after a merge of several pods'
    data runs on a laptop, and its manifests record the topology they saw without being refused for it."""
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
    if not serves:
        check.update(applies=False, marked=False, why="no server starts here: the GPU and topology rules apply "
                                                      "where one does")
        return check
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
    data_root: Path | str = paths.DATA_DIR,
    url: str | None = None,
    port: int | None = None,
    only: list[str] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
    fail_fast: bool = False,
) -> CampaignResult:
    """Run a campaign's boot attempts and experiments; see the module docstring. ``progress`` shows experiments,
    cells and the notebooks' counts as they run (its ``log`` replaces ``log``).

    Returns the result when every experiment ran ok; raises :class:`depends.CampaignFailed` (its ``result`` attached)
    after running all it could when some failed, or, with ``fail_fast``, the first failure's own error at once."""
    started = time.monotonic()
    if log is None:
        log = progress.log if progress is not None else print
    # A caller that already read the file (the CLI, to size its display) hands it over: it is parsed once.
    campaign = path if isinstance(path, Campaign) else load_campaign(path)
    data_root = Path(data_root)
    if not data_root.is_absolute():
        data_root = campaign.root / data_root
    validate(campaign, show=progress is not None, own_server=url is None)
    spec = campaign.spec
    known = [e.experiment for e in spec.experiments] + ([BOOTS] if spec.boots else [])
    if only and set(only) - set(known):
        raise InputError(f"--only names experiments not in {campaign.file}: {sorted(set(only) - set(known))} "
                         f"(it has {known})")
    experiments = [e for e in spec.experiments if not only or e.experiment in only]
    do_boots = bool(spec.boots) and (not only or BOOTS in only)
    if url and spec.repeat_boots > 1:
        raise InputError("repeat_boots needs the campaign to start its own server; leave out --url")
    own = [e.experiment for e in experiments if url and e.needs_server and (e.stack or e.override)]
    if own:  # said before anything runs, not when the campaign reaches them
        raise InputError(f"experiment(s) {own} run on their own server variant; run without --url, or leave them out "
                         "with --only")
    if url and do_boots:
        log("boot attempts skipped: --url uses a server that is already running")
        do_boots = False
    result = CampaignResult(campaign=spec.name, data_root=data_root)
    env = environment.capture_environment()
    session = None
    if spec.ledger:
        analysis_only = not do_boots and not any(e.needs_server for e in experiments)
        session = ledger.start_session(
            # analysis only: this machine is not the rented pod, its minutes are not the stack's price
            data_root, spec.name, env, None if analysis_only else _price(campaign),
            campaign_file={"path": str(campaign.file), "sha256": runs.sha256_file(campaign.file)},
            only=only, url=url is not None,
        )
        result.session = session.id
    outcome, error, failed = "failed", None, None
    tracker = depends.Tracker(dependencies(campaign), {e.experiment for e in experiments}, result.outcomes)
    try:
        with signals.stopping_on_signals():
            _run_session(campaign, experiments, data_root, url, port, env, do_boots, log, result, progress,
                         tracker, fail_fast)
        if result.failures:
            failed = depends.CampaignFailed(result, result.outcomes)
            error = depends.first_line(str(failed))
        else:
            outcome = "ok"
    except BaseException as e:
        outcome = "stopped" if isinstance(e, (KeyboardInterrupt, _Refused)) else outcome_of(e)
        error = signals.reason_of(e.__cause__ if isinstance(e, _Refused) else e)
        if isinstance(e, _Refused):
            raise e.__cause__ from None
        raise
    finally:
        result.seconds = time.monotonic() - started
        if session is not None:
            session.end(outcome, [str(r) for r in result.boot_runs + result.runs], error,
                        failures=[o.record() for o in result.failures], skipped=[o.record() for o in result.skipped])
    if failed is not None:
        raise failed
    return result


class _Refused(Exception):
    """The campaign's own topology rule refused to start: a stopped session, not a failed one."""


def _run_session(campaign: Campaign, experiments: list[ExperimentSpec], data_root: Path, url: str | None,
                 port: int | None, env: dict[str, Any], do_boots: bool, log: Callable[[str], None],
                 result: CampaignResult, progress: Progress | None, tracker: depends.Tracker,
                 fail_fast: bool) -> None:
    spec = campaign.spec
    try:
        serves = url is None and (do_boots or any(e.needs_server for e in experiments))
        result.topology = topology_check(spec.topology, env, serves=serves)
    except InputError as e:
        raise _Refused() from e  # refused by the campaign's own rule, before anything ran
    if result.topology["marked"]:
        log("marked: GPUs on different NUMA nodes (SYS); every manifest of this session says so")
    marks = {"session": result.session, "topology_check": result.topology}
    if do_boots:
        result.boot_attempts = run_boot_attempts(campaign, data_root, port, env, marks, log)
        result.boot_runs += [Path(r["run"]) for r in result.boot_attempts]
    _run_experiments(campaign, experiments, data_root, url, port, env, marks, log, result,
                     Step(campaign, data_root, env, log, marks, result, progress, tracker, fail_fast,
                          Servers(campaign, data_root, url, port, env, marks, log)))


def _price(campaign: Campaign) -> dict[str, Any] | None:
    path = campaign.stack_path(None)
    if path is None:
        return None
    st = stackmod.load_stack(path, root=campaign.root)
    return st.spec.price.model_dump() if st.spec.price else None


def _run_experiments(campaign: Campaign, experiments: list[ExperimentSpec], data_root: Path, url: str | None,
                     port: int | None, env: dict[str, Any], marks: dict[str, Any], log: Callable[[str], None],
                     result: CampaignResult, step: Step) -> None:
    """Every experiment in the file's order (under repeat_boots: the server ones after each boot, then the others);
    ``step`` runs each, records how it ended and, unless fail_fast, goes on."""
    k = campaign.spec.repeat_boots
    servers = step.servers
    try:
        if k == 1:
            for exp in experiments:
                step.run(exp, (0, 1))
        else:
            for i in range(k):
                for exp in (e for e in experiments if e.needs_server):
                    step.run(exp, (i, k))
                # The next round starts from a fresh boot, even on the same variant (one that failed is tried again).
                servers.close()
                step.dead_servers.clear()
            for exp in (e for e in experiments if not e.needs_server):
                step.run(exp, (None, k))
    finally:
        servers.close()
        # (a server that did not start is listed already, by the step that tried it)
        result.boot_runs += [r for r in servers.boot_runs if r not in result.boot_runs]
        if servers.boot_runs:
            result.boot_run = servers.boot_runs[0]


