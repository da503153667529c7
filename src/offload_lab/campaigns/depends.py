"""What a campaign does when an experiment fails: it records it, goes on with the experiments that do not depend on
it, and ends with a summary naming each failure and each skip (:class:`CampaignFailed`, exit 4).

An experiment *depends on* another when it reads that one's runs. The dependencies are declared once, where they are
known:

- in the campaign file, ``after: [NAME, ...]`` on an experiment entry (for what no parameter says);
- by the experiment's own parameters: a Params model with a method ``reads_experiments(self) -> list[str]`` names the
  experiments whose runs it reads (the quality comparison's ``compare_runs``; capacity and cost's inputs: the
  ``published_experiment``, or the measured sweeps and context runs). A name there that is not an experiment of the
  campaign reads runs of an earlier session, and is no dependency of this one.

Experiments run in the file's order, so a dependency is listed before its dependent; a circle or a dependency listed
later is a bad campaign file (exit 2), found before anything runs. During a session, an experiment whose dependency
(its latest run in this session, under repeat boots) failed, was stopped by its stop rule, or was itself skipped is
not run: it is recorded as ``skipped`` with the reason. A dependency left out with ``--only`` is not in the session:
its runs from earlier sessions are read as they are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from pydantic import BaseModel

from offload_lab.core.errors import ProducerError
from offload_lab.experiments.notebook import has_params_model, kind_of_notebook, validate_params

if TYPE_CHECKING:
    from offload_lab.campaigns.runner import Campaign, ExperimentSpec

OK, FAILED, STOPPED, SKIPPED = "ok", "failed", "stopped", "skipped"
# What keeps an experiment's dependents from running: they would read no ok run of it from this session.
BLOCKING = (FAILED, STOPPED, SKIPPED)


def reads_experiments(params: BaseModel | None) -> list[str]:
    """The experiments whose runs ``params`` (a validated Params model) says it reads; none without the method."""
    method = getattr(params, "reads_experiments", None)
    if params is None or not callable(method):
        return []
    return [str(n) for n in method()]


def experiment_params(campaign: Campaign, exp: ExperimentSpec) -> dict[str, Any]:
    """The experiment's parameters as its Params model validates them: what manifests record and claims read."""
    model = params_model(campaign, exp)
    return dict(exp.parameters) if model is None else model.model_dump(mode="json")


def params_model(campaign: Campaign, exp: ExperimentSpec) -> BaseModel | None:
    kind = kind_of_notebook(exp.notebook)
    if not has_params_model(kind):
        return None  # a notebook of the campaign's own: papermill's declared names are its only check
    return validate_params(kind, exp.parameters, f"campaign file {campaign.file}, experiment {exp.experiment}",
                           strict=True)


def dependencies(campaign: Campaign) -> dict[str, list[str]]:
    """For each experiment, the experiments of this campaign whose runs it reads: its ``after:`` list and what its
    parameters name (``reads_experiments``); a name the campaign does not have reads an earlier session's runs."""
    names = {e.experiment for e in campaign.spec.experiments}
    out: dict[str, list[str]] = {}
    for exp in campaign.spec.experiments:
        read = [n for n in reads_experiments(params_model(campaign, exp)) if n in names]
        out[exp.experiment] = list(dict.fromkeys([*exp.after, *read]))
    return out


def repeat_order_problem(campaign: Campaign) -> str | None:
    # Under repeat_boots the notebooks that need no server run after the last boot, whatever their place in the file.
    if campaign.spec.repeat_boots == 1:
        return None
    later = {e.experiment for e in campaign.spec.experiments if not e.needs_server}
    graph = dependencies(campaign)
    for exp in campaign.spec.experiments:
        deps = [d for d in graph[exp.experiment] if d in later]
        if exp.needs_server and deps:
            return (f"experiment {exp.experiment} reads the runs of {deps}, which need no server and so run after the "
                    "last of the repeat_boots; under repeat_boots a server experiment can depend only on server "
                    "experiments")
    return None


def after_problem(order: list[str], after: Mapping[str, list[str]]) -> str | None:
    """Why the campaign file's ``after:`` lists are wrong (a name it does not have, a circle, a dependency listed
    later), or None. Names the experiment and what to do."""
    known = set(order)
    for name in order:
        unknown = [d for d in after.get(name, []) if d not in known]
        if unknown:
            return (f"experiment {name}: after names {unknown}, which the campaign does not have (it has {order}); "
                    "name experiments of this file")
    return graph_problem(order, after)


def graph_problem(order: list[str], edges: Mapping[str, Iterable[str]]) -> str | None:
    """A circle among the dependencies, or a dependency listed after its dependent; None when there is neither."""
    cycle = _cycle(order, edges)
    if cycle:
        return (f"experiments {' -> '.join(cycle)} depend on each other in a circle (through `after:` or the runs "
                "their parameters read); none of them could run first")
    position = {n: i for i, n in enumerate(order)}
    for name in order:
        for dep in edges.get(name, []):
            if position[dep] > position[name]:
                return (f"experiment {name} reads the runs of {dep}, which is listed after it; experiments run in the "
                        f"file's order, so move {dep} before {name}")
    return None


def _cycle(order: list[str], edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for d in edges.get(n, []):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        path.pop()
        state[n] = 2
        return None

    for n in order:
        if n not in state and (found := visit(n)):
            return found
    return None


def first_line(text: str | None) -> str | None:
    """An error's first line (a notebook's exception value, a server's log tail follow it), marked when cut."""
    if text is None:
        return None
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return "" if not lines else lines[0].strip() + (" \u2026" if len(lines) > 1 else "")


@dataclass
class ExperimentOutcome:
    """How one experiment (one run of it, under repeat boots) ended in this session."""

    experiment: str
    outcome: str  # ok, failed, stopped (by its stop rule), skipped
    run: str | None = None  # its run directory; for a server that did not start, that boot's run
    error: str | None = None  # the error's first line, or why it was skipped
    boot: int | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Tracker:
    """The session's outcomes, and which experiment may run given them."""

    depends: Mapping[str, list[str]]
    in_session: set[str]
    outcomes: list[ExperimentOutcome] = field(default_factory=list)
    latest: dict[str, ExperimentOutcome] = field(default_factory=dict)

    def blocked(self, name: str) -> str | None:
        """Why ``name`` may not run (a dependency of this session that failed or was skipped), or None."""
        for dep in self.depends.get(name, []):
            last = self.latest.get(dep)
            if dep in self.in_session and last is not None and last.outcome in BLOCKING:
                how = "was skipped" if last.outcome == SKIPPED else \
                    "was stopped by its stop rule" if last.outcome == STOPPED else "failed"
                where = f" ({last.run})" if last.run else ""
                return f"it reads the runs of {dep}, which {how} in this session{where}"
        return None

    def add(self, outcome: ExperimentOutcome) -> ExperimentOutcome:
        outcome.error = first_line(outcome.error)
        self.outcomes.append(outcome)
        self.latest[outcome.experiment] = outcome
        return outcome


def failures(outcomes: Iterable[ExperimentOutcome]) -> list[ExperimentOutcome]:
    return [o for o in outcomes if o.outcome in (FAILED, STOPPED)]


def skips(outcomes: Iterable[ExperimentOutcome]) -> list[ExperimentOutcome]:
    return [o for o in outcomes if o.outcome == SKIPPED]


def summary_lines(outcomes: list[ExperimentOutcome]) -> list[str]:
    """One line per failure (experiment, run directory, the error's first line) and per skip (and why)."""
    lines = []
    for o in failures(outcomes):
        lines.append(f"{o.outcome}: {o.experiment}" + (f" ({o.run})" if o.run else "") + f": {o.error}")
    for o in skips(outcomes):
        lines.append(f"skipped: {o.experiment}: {o.error}")
    return lines


class CampaignFailed(ProducerError):
    """The campaign ran all it could and some experiments failed (exit 4); ``result`` is its CampaignResult."""

    def __init__(self, result: Any, outcomes: list[ExperimentOutcome]):
        self.result = result
        failed, skipped = failures(outcomes), skips(outcomes)
        head = (f"campaign {getattr(result, 'campaign', '')}: {len(failed)} of {len(outcomes)} experiment run(s) "
                f"failed" + (f", {len(skipped)} skipped" if skipped else "") + "; the rest ran, and every run is kept")
        hint = ("open the run's notebook.ipynb (a server's: boot.json and server.log), fix it, and run those "
                "experiments again with --only")
        super().__init__("\n  ".join([head, *summary_lines(outcomes)]) + ("\n" + hint if failed else ""))
