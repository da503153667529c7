"""What every experiment notebook does first: take its parameters, check them, and open (or join) its run.

A notebook is run four ways: by the campaign runner (papermill, at the repository root, with ``run_dir`` given), by
papermill by hand (from the root or from ``notebooks/``), by ``jupyter nbconvert --execute`` and in JupyterLab (both
start the kernel in ``notebooks/``). :func:`running` makes all four alike:

* the kernel moves to the repository root (:func:`offload_lab.core.paths.find_root`), so relative paths in
  parameters (``data``, ``configs/...``, ``models/...``) mean the same files whoever started it;
* a parameter papermill injected that the experiment does not declare fails the run, naming it (papermill itself only
  warns); the declared ones are validated by the experiment's :class:`Params` model, so a wrong type fails too;
* run by hand, the notebook makes its own run under the repository's ``data/`` and records its notebook, its
  validated parameters and its outcome: ``ok``, ``failed`` on an error, ``stopped`` on an interrupt;
* under the campaign runner it joins the run the runner made (the runner records and finishes it).
"""

from __future__ import annotations

import ast
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from pydantic import BaseModel, ValidationError

from offload_lab.core import paths, runs
from offload_lab.core.errors import InputError

# Parameters the campaign runner fills in itself; every experiment notebook declares them.
RUNNER_PARAMETERS = ("base_url", "run_dir", "campaign", "data_root")
HAND_CAMPAIGN = "scratch"
NOTEBOOKS_DIR = "notebooks"
PARAMS_MODULE = "params"
# The first line papermill writes into the cell it injects (its Python translator's comment).
INJECTED_HEADER = "# Parameters\n"


@dataclass
class NotebookRun:
    """An experiment's run as a notebook sees it."""

    kind: str
    run: runs.Run
    params: Any
    base_url: str | None
    campaign: str
    data_root: Path
    owned: bool


def params_model(kind: str) -> type[BaseModel]:
    """The experiment's parameters model, ``offload_lab.experiments.<kind>.params.Params``."""
    import importlib

    try:
        module = importlib.import_module(f"offload_lab.experiments.{kind}.{PARAMS_MODULE}")
    except ModuleNotFoundError as e:
        raise InputError(f"experiment {kind!r} has no parameters model (offload_lab.experiments.{kind}.params); "
                         f"is {NOTEBOOKS_DIR}/{kind}.ipynb an experiment notebook?") from e
    return module.Params


def has_params_model(kind: str) -> bool:
    """Whether ``kind`` is one of the project's experiments (a folder with a params module); a campaign may also run
    a notebook of its own, whose parameters papermill's declared names are the only check of."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"offload_lab.experiments.{kind}.{PARAMS_MODULE}") is not None
    except ModuleNotFoundError:
        return False


def notebook_of(kind: str) -> str:
    """The notebook of an experiment, relative to the repository root."""
    return f"{NOTEBOOKS_DIR}/{kind}.ipynb"


def kind_of_notebook(notebook: str | Path) -> str:
    """The experiment a notebook belongs to: its file name without ``.ipynb`` (``notebooks/context.ipynb``)."""
    return Path(notebook).stem


def validate_params(kind: str, values: Mapping[str, Any], where: str) -> BaseModel:
    """Build the experiment's parameters; an InputError names ``where`` and every field that is wrong."""
    model = params_model(kind)
    try:
        return model.model_validate(dict(values))
    except ValidationError as e:
        details = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(all)'}: {err['msg']}" for err in e.errors())
        raise InputError(f"{where}: parameters of experiment {kind} are not valid: {details}") from e


def injected_names(namespace: Mapping[str, Any]) -> set[str]:
    """Names assigned by the cells papermill injected (read from IPython's input history, ``In``)."""
    names: set[str] = set()
    for source in namespace.get("In") or []:
        if not isinstance(source, str) or not source.startswith(INJECTED_HEADER):
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def check_injected(kind: str, namespace: Mapping[str, Any]) -> None:
    declared = set(params_model(kind).model_fields) | set(RUNNER_PARAMETERS)
    unknown = sorted(injected_names(namespace) - declared)
    if unknown:
        raise InputError(
            f"{notebook_of(kind)} was given parameter(s) {unknown} that experiment {kind} does not declare "
            f"(it declares {sorted(declared)}); check the names passed with -p"
        )


def _record_notebook(root: Path, kind: str) -> dict[str, Any]:
    path = root / notebook_of(kind)
    return {"path": notebook_of(kind), "sha256": runs.sha256_file(path) if path.is_file() else None,
            "how": "by hand (papermill, nbconvert or Jupyter)"}


def start(kind: str, namespace: Mapping[str, Any]) -> NotebookRun:
    """Check the parameters in ``namespace`` (a notebook's ``globals()``) and open or join the run."""
    root = paths.find_root()
    os.chdir(root)
    check_injected(kind, namespace)
    fields = params_model(kind).model_fields
    params = validate_params(kind, {k: namespace[k] for k in fields if k in namespace}, notebook_of(kind))
    campaign = str(namespace.get("campaign") or HAND_CAMPAIGN)
    data_root = paths.data_root(namespace.get("data_root"), root)
    run_dir = namespace.get("run_dir")
    if run_dir:
        return NotebookRun(kind, runs.attach_run(run_dir), params, namespace.get("base_url"), campaign, data_root,
                           owned=False)
    from offload_lab.core.environment import capture_environment

    run = runs.new_run(data_root, campaign, kind, params.model_dump(mode="json"), environment=capture_environment(),
                       notebook=_record_notebook(root, kind), hand_run=True)
    return NotebookRun(kind, run, params, namespace.get("base_url"), campaign, data_root, owned=True)


@contextlib.contextmanager
def running(kind: str, namespace: Mapping[str, Any],
            stopped: tuple[type[BaseException], ...] = (KeyboardInterrupt,)) -> Iterator[NotebookRun]:
    """:func:`start`, then finish a run the notebook owns however the block ends (``stopped`` for the exceptions
    named, ``failed`` for any other, ``ok`` otherwise); the campaign runner finishes the runs it made."""
    nr = start(kind, namespace)
    with runs.finishing_if_owned(nr.run, nr.owned, stopped=stopped):
        yield nr
    print("run directory:", nr.run.path)
