"""One experiment of a campaign session: skipped when a dependency failed, else its server, then its notebook
executed into a new run directory whose manifest is finished however the notebook ends.

A notebook's failure (or its stop rule) and a server that does not start are the experiment's outcome: recorded,
shown, and the session goes on (:mod:`offload_lab.campaigns.depends`), unless ``fail_fast``. A signal is a
BaseException and passes through: it stops the whole campaign.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from offload_lab.campaigns import depends
from offload_lab.campaigns.execute import OUTPUT_NOTEBOOK, execute_notebook, executed_cells
from offload_lab.campaigns.progress import Progress
from offload_lab.campaigns.servers import Servers
from offload_lab.core import environment, redact, runs, signals
from offload_lab.core.errors import ServerError
from offload_lab.experiments.notebook import kind_of_notebook, url_parameters

if TYPE_CHECKING:
    from offload_lab.campaigns.runner import Campaign, CampaignResult, ExperimentSpec

BOOTS = "boots"


@dataclass
class Step:
    """One experiment of the session: skipped when a dependency failed, else its server, then its notebook; a failure
    of either is recorded and the session goes on (unless fail_fast)."""

    campaign: Campaign
    data_root: Path
    env: dict[str, Any]
    log: Callable[[str], None]
    marks: dict[str, Any]
    result: CampaignResult
    progress: Progress | None
    tracker: depends.Tracker
    fail_fast: bool
    servers: Servers
    # Variants whose server did not start in this round: their other experiments fail at once, without a reboot.
    dead_servers: dict[tuple[str, str], depends.ExperimentOutcome] = field(default_factory=dict)

    def run(self, exp: ExperimentSpec, boot: tuple[int | None, int]) -> None:
        reason = self.tracker.blocked(exp.experiment)
        if reason is not None:
            self._record(depends.ExperimentOutcome(exp.experiment, depends.SKIPPED, None, reason, boot[0]))
            return
        info = self._server(exp, boot) if boot[0] is not None else {}
        if info is None:
            return
        before = len(self.result.runs)
        try:
            run = run_one(self.campaign, exp, self.data_root, info, self.env, self.log, self.marks, boot,
                          self.result.runs, self.progress)
        except Exception as e:  # a notebook's failure of any kind (a signal is a BaseException and stops it all)
            made = self.result.runs[before] if len(self.result.runs) > before else None
            outcome = depends.ExperimentOutcome(exp.experiment, outcome_of(e), _str(made), signals.reason_of(e),
                                                boot[0])
            self._record(outcome, shown=made is not None)
            if self.fail_fast:
                raise
            return
        self._record(depends.ExperimentOutcome(exp.experiment, depends.OK, str(run), None, boot[0]), shown=True)

    def _server(self, exp: ExperimentSpec, boot: tuple[int | None, int]) -> dict[str, Any] | None:
        """The server for ``exp`` (``{}`` or the current one's for a notebook that needs none), or None when it did
        not start (recorded as this experiment's failure)."""
        if not exp.needs_server:
            return self.servers.current()
        key = _variant_key(self.campaign, exp)
        dead = self.dead_servers.get(key)
        if dead is not None:
            self._record(depends.ExperimentOutcome(exp.experiment, depends.FAILED, dead.run,
                                                   f"its server did not start earlier in this round: {dead.error}",
                                                   boot[0]))
            return None
        boots_before = set(_boot_runs(self.data_root, self.campaign.spec.name))
        try:
            return self.servers.get(exp, boot[0] or 0, boot[1])
        except ServerError as e:
            if self.servers.url:
                raise  # the --url given does not answer: nothing on it can run, so say so at once (exit 3)
            # The failed boot is kept (stack.start_server records it before raising): name it and list it.
            new = sorted(set(_boot_runs(self.data_root, self.campaign.spec.name)) - boots_before)
            self.result.boot_runs += [p for p in new if p not in self.result.boot_runs]
            outcome = depends.ExperimentOutcome(exp.experiment, depends.FAILED, _str(new[-1] if new else None),
                                                str(e), boot[0])
            self.dead_servers[key] = self._record(outcome)
            if self.fail_fast:
                raise
            return None

    def _record(self, outcome: depends.ExperimentOutcome, shown: bool = False) -> depends.ExperimentOutcome:
        """Keep the outcome; say it (the notebook's own display already did when ``shown``)."""
        self.tracker.add(outcome)
        if outcome.outcome == depends.OK:
            return outcome
        if not shown and self.progress is not None:
            self.progress.not_run(outcome.experiment, outcome.outcome, outcome.error, outcome.run)
        elif self.progress is None:  # the display said it already otherwise
            self.log(f"{outcome.experiment}: {outcome.outcome}: {outcome.error}")
        if outcome.outcome != depends.SKIPPED and not self.fail_fast:
            self.log(f"going on with the experiments that do not read the runs of {outcome.experiment}")
        return outcome


def _variant_key(campaign: Campaign, exp: ExperimentSpec) -> tuple[str, str]:
    # Which server an experiment runs on, as campaigns.servers.Servers tells variants apart.
    return (exp.stack or campaign.spec.stack or "", exp.override.key() if exp.override else "")


def _boot_runs(data_root: Path, campaign: str) -> list[Path]:
    return list(runs.iter_runs(data_root, campaign, BOOTS))


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def run_one(campaign: Campaign, exp: ExperimentSpec, data_root: Path, server: dict[str, Any],
            env: dict[str, Any], log: Callable[[str], None], marks: dict[str, Any] | None = None,
            boot: tuple[int | None, int] = (0, 1), started: list[Path] | None = None,
            progress: Progress | None = None) -> Path:
    """A new run directory, the notebook executed into it, the manifest finished (ok, failed, stopped); returns the
    run directory, or raises what ended the notebook after finishing its run."""
    nb = campaign.notebook_path(exp)
    marks = marks or {}
    validated = depends.experiment_params(campaign, exp)
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
    # The URL's credentials (user:password@) go to the kernel in its environment, not in the parameters that
    # papermill writes into the output notebook.
    hidden_url = redact.url_outside_parameters(server.get("url"))
    # `url`, and `base_url` too for a notebook written before the rename (kept for one release).
    shown_url = redact.redact_url(server["url"]) if server.get("url") else None
    params = {**validated, **dict.fromkeys(url_parameters(nb), shown_url),
              "run_dir": str(run.path), "campaign": campaign.spec.name, "data_root": str(data_root)}
    if progress is not None:
        progress.experiment(exp.experiment, executed_cells(nb, params), detail=exp.notebook, run=str(run.path))
    else:
        log(f"running {exp.experiment} ({exp.notebook}) into {run.path}")
    sampler = environment.LoadSampler()
    try:
        with sampler, hidden_url:
            execute_notebook(nb, run.file(OUTPUT_NOTEBOOK), params, cwd=campaign.root, watcher=progress)
    except BaseException as e:
        _finish(run, outcome_of(e), sampler, error=signals.reason_of(e))
        if progress is not None:
            progress.done(outcome_of(e), signals.reason_of(e))
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


def outcome_of(e: BaseException) -> str:
    # A sweep ended by its declared stop rule is a stopped run, not a broken notebook.
    cause = e.__cause__
    if isinstance(e, KeyboardInterrupt) or getattr(cause, "ename", None) == "SweepStopped":
        return "stopped"
    return "failed"
