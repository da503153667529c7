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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from pydantic import BaseModel, ValidationError

from offload_lab.core import paths, runs
from offload_lab.core.redact import url_with_credentials
from offload_lab.core.errors import InputError

# Parameters the campaign runner fills in itself; every experiment notebook declares them.
RUNNER_PARAMETERS = ("url", "run_dir", "campaign", "data_root")
# The server's URL was the parameter `base_url` before it took the name the command line gives it (`--url`): the old
# name still works for one release, with one deprecation line.
OLD_URL_PARAMETER = "base_url"
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
    url: str | None
    campaign: str
    data_root: Path
    owned: bool

    @property
    def base_url(self) -> str | None:
        """The old name of :attr:`url` (notebooks written before the rename): kept for one release."""
        return self.url


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


def validate_params(kind: str, values: Mapping[str, Any], where: str, strict: bool = False) -> BaseModel:
    """Build the experiment's parameters; an InputError names ``where`` and every field that is wrong. ``strict``
    (a campaign file's values): no coercion, so `repeats: true` or `output_tokens: "64"` is refused, not read as 1
    or 64."""
    model = params_model(kind)
    values = dict(values)
    try:
        try:
            return model.model_validate(values, strict=strict)
        except ValidationError as first:
            # Not strict (a notebook's parameters): a text where the field wants a list, a mapping or a number is
            # read as YAML (JSON included) first: papermill's `-p context_lengths "[256, 1024]"` passes the text.
            read = values if strict else _read_texts(values, first)
            if read == values:
                raise
            return model.model_validate(read)
    except ValidationError as e:
        details = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(all)'}: {err['msg']}"
                            + (" (give it as 256,1024 or [256, 1024])" if err["type"] in _LIST_ERRORS else "")
                            for err in e.errors())
        raise InputError(f"{where}: parameters of experiment {kind} are not valid: {details}") from e


def _read_texts(values: dict[str, Any], error: ValidationError) -> dict[str, Any]:
    """``values`` with each text a field refused read as YAML, where it reads as something other than text."""
    from offload_lab.core.inputs import parse_yaml_value

    out = dict(values)
    for err in error.errors():
        name = err["loc"][0] if err["loc"] else None
        if not isinstance(name, str) or not isinstance(values.get(name), str):
            continue
        try:
            # Bounded (core.inputs): a YAML alias bomb in a parameter is refused, never expanded.
            parsed = parse_yaml_value(values[name], f"parameter {name}")
        except InputError as e:
            if "bomb" in str(e) or "characters" in str(e) or "deeply" in str(e):
                raise
            continue
        if isinstance(parsed, str) and err["type"] in _LIST_ERRORS and "," in parsed:
            # `-p context_lengths 256,1024`: a comma-separated list, each item read as YAML (256 -> int).
            parsed = [parse_yaml_value(item.strip(), f"parameter {name}") for item in parsed.split(",")
                      if item.strip()]
        if not isinstance(parsed, str):
            out[name] = parsed
    return out


_LIST_ERRORS = ("list_type", "tuple_type", "set_type")


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
    declared = set(params_model(kind).model_fields) | set(RUNNER_PARAMETERS) | {OLD_URL_PARAMETER}
    unknown = sorted(injected_names(namespace) - declared)
    if unknown:
        raise InputError(
            f"{notebook_of(kind)} was given parameter(s) {unknown} that experiment {kind} does not declare "
            f"(it declares {sorted(declared)}); check the names passed with -p"
        )


def check_not_overridden(kind: str, namespace: Mapping[str, Any]) -> None:
    """A cell run after papermill's injected one that assigns an injected name again (a copied parameters cell, whose
    ``run_dir = None`` would make a stray run in the scratch campaign) is refused, naming the names: the values
    papermill was given are the ones the run must use."""
    sources = [s for s in (namespace.get("In") or []) if isinstance(s, str)]
    last = max((i for i, s in enumerate(sources) if s.startswith(INJECTED_HEADER)), default=None)
    if last is None:
        return
    injected = injected_names({"In": [sources[last]]})
    for source in sources[last + 1:]:
        again = sorted(injected & _assigned(source))
        if again:
            raise InputError(f"{notebook_of(kind)}: a cell after papermill's injected parameters assigns {again} "
                             "again (a copy of the parameters cell?), which would override the values given; remove "
                             "it, or its 'parameters' tag")


def _assigned(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _record_notebook(root: Path, kind: str) -> dict[str, Any]:
    path = root / notebook_of(kind)
    return {"path": notebook_of(kind), "sha256": runs.sha256_file(path) if path.is_file() else None,
            "how": "by hand (papermill, nbconvert or Jupyter)"}


def start(kind: str, namespace: Mapping[str, Any]) -> NotebookRun:
    """Check the parameters in ``namespace`` (a notebook's ``globals()``) and open or join the run."""
    _short_errors()
    root = paths.find_root()
    os.chdir(root)
    check_injected(kind, namespace)
    check_not_overridden(kind, namespace)
    fields = params_model(kind).model_fields
    params = validate_params(kind, {k: namespace[k] for k in fields if k in namespace}, notebook_of(kind))
    campaign = str(namespace.get("campaign") or HAND_CAMPAIGN)
    data_root = paths.data_root(namespace.get("data_root"), root)
    run_dir = namespace.get("run_dir")
    # A campaign passes the URL redacted and its credentials in the kernel's environment (core.redact).
    given_url = url_given(namespace)
    if run_dir:
        return NotebookRun(kind, runs.attach_for_writing(run_dir), params, url_with_credentials(given_url), campaign,
                           data_root, owned=False)
    url = hand_url(given_url)
    from offload_lab.core.environment import capture_environment

    server = _hand_server(url)
    run = runs.new_run(data_root, campaign, kind, params.model_dump(mode="json"), environment=capture_environment(),
                       notebook=_record_notebook(root, kind), hand_run=True, server=server)
    return NotebookRun(kind, run, params, url, campaign, data_root, owned=True)


def url_given(namespace: Mapping[str, Any]) -> Any:
    """The ``url`` parameter, or the old ``base_url`` when that is the one given (one deprecation line)."""
    old = namespace.get(OLD_URL_PARAMETER)
    if old is None or old == namespace.get("url"):  # a campaign fills in both for a notebook that declares both
        return namespace.get("url")
    print(f"warning: the notebook parameter {OLD_URL_PARAMETER} is deprecated, use url (`-p url URL`); the old name "
          "goes in a later release", file=sys.stderr)
    return old


def url_parameters(notebook: Path | str) -> tuple[str, ...]:
    """The names a campaign gives the server's URL in a notebook: ``url``, and ``base_url`` too where the notebook's
    parameters cell declares it (written before the rename; filled in for one release)."""
    import json

    try:
        cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return ("url",)
    for c in cells:
        if "parameters" in (c.get("metadata", {}).get("tags") or []):
            names = _assigned("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            return ("url", OLD_URL_PARAMETER) if OLD_URL_PARAMETER in names else ("url",)
    return ("url",)


def hand_url(given: Any) -> str | None:
    """A hand run's server: ``url`` through the check ``bench --url`` makes (core.inputs.check_server_url),
    with credentials refused there (papermill writes parameters into the output notebook); a URL with credentials
    comes whole from the environment (:data:`offload_lab.core.redact.SERVER_URL_ENV`), with url left out."""
    from offload_lab.core.inputs import check_server_url
    from offload_lab.core.redact import SERVER_URL_ENV, add_url_secrets

    full = url_with_credentials(given)
    if given and full != given:  # the redacted form, the whole URL in the environment (campaigns.execute does so)
        return check_server_url(full, "url")
    if given:
        return check_server_url(given, "url", credentials=False)
    from_env = os.environ.get(SERVER_URL_ENV)
    if from_env:
        add_url_secrets(from_env)
        return check_server_url(from_env, SERVER_URL_ENV)
    return None


def _short_errors() -> None:
    """In IPython, a wrong parameter or a server that does not answer (InputError, ServerError: their message says
    what to do) shows as its one line, not a traceback through the library; papermill's error says the same line."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from offload_lab.core.errors import ServerError

    from offload_lab.core.redact import redact_text

    def one_line(self: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:
        line = f"{etype.__name__}: {redact_text(str(value))}"
        self._showtraceback(etype, value, [line])  # IPython's documented way to show a custom traceback
        return [line]

    shell.set_custom_exc((InputError, ServerError), one_line)


def _hand_server(url: Any) -> dict[str, Any] | None:
    """The server a hand run measures, as its manifest records it (the URL redacted), after checking that it answers:
    the message names papermill's parameter, since a notebook has no --url."""
    if not url:
        return None
    from offload_lab.core.errors import ServerError
    from offload_lab.core.redact import redact_url
    from offload_lab.load.endpoint import Endpoint

    endpoint = Endpoint.of(str(url))
    try:
        models = endpoint.check_reachable().get("data") or []
    except ServerError as e:
        first = str(e).split("; start one with")[0]
        raise ServerError(f"{first}; start one with `offload-lab serve --stack configs/stacks/embedded.yaml`, then "
                          "give the notebook its URL: `-p url http://127.0.0.1:PORT` with papermill, or "
                          "url in the parameters cell in Jupyter") from None
    return {"url": redact_url(str(url)), "model": models[0].get("id") if models else None, "by": "hand run"}


@contextlib.contextmanager
def running(kind: str, namespace: Mapping[str, Any],
            stopped: tuple[type[BaseException], ...] = (KeyboardInterrupt,)) -> Iterator[NotebookRun]:
    """:func:`start`, then finish a run the notebook owns however the block ends (``stopped`` for the exceptions
    named, ``failed`` for any other, ``ok`` otherwise); the campaign runner finishes the runs it made."""
    nr = start(kind, namespace)
    try:
        with runs.finishing_if_owned(nr.run, nr.owned, stopped=stopped):
            yield nr
            # Before the run is finished: figures drawn here go into its manifest like the rest of its files.
            show_figures(run_figures(nr))
    finally:
        say_run_directory(nr)


RUN_DIRECTORY = "run directory:"  # the line a hand run ends with; campaigns.execute reads it from the output notebook


def say_run_directory(nr: NotebookRun) -> None:
    """The run's directory, however the run ended: in the notebook, and for a hand run in the terminal that started
    the kernel too: papermill shows a kernel's output only with --log-output, but the kernel's own stderr (ipykernel
    keeps a copy of it, ``_original_stdstream_copy``, when it captures the descriptor) is that terminal."""
    import sys

    line = f"{RUN_DIRECTORY} {nr.run.path} ({nr.run.manifest.get('outcome')})"
    print(line, flush=True)
    terminal = getattr(sys.stderr, "_original_stdstream_copy", None)
    if nr.owned and isinstance(terminal, int):
        try:
            # On a line of its own: papermill's progress bar may be half drawn there.
            os.write(terminal, f"\n{line}\n".encode())
        except OSError:  # a closed or absent terminal: the notebook has the line
            pass


FIGURES_DIR = "figures"
IMAGE_SUFFIXES = (".png", ".svg")


def run_figures(nr: NotebookRun) -> list[Path | Any]:
    """The figures to show at the end of a run: the images it drew into ``figures/`` (the paper's own, drawn by
    :func:`offload_lab.paper.figures.draw_run_figures`), else the paper's figures of this experiment drawn now when the
    run holds their files, else one picture of its first table that has something to draw (the explore notebook's
    :func:`~offload_lab.paper.explore_plots.plot_generic`, shown only: the paper does not know it)."""
    drawn = _images(nr.run.path / FIGURES_DIR)
    if drawn:
        return drawn
    from offload_lab.paper import figures
    from offload_lab.paper.discovery import figure_registry

    own = {name: d for name, d in figure_registry().items()
           if d.experiment == nr.kind and d.experiments == (nr.kind,)
           and all((nr.run.path / f).is_file() for f in d.files)}
    if own:
        figures.draw_run_figures(nr.run.path, nr.kind, registry=own)
        return _images(nr.run.path / FIGURES_DIR)
    try:
        fig = _table_picture(nr.run.path, nr.kind)
    except Exception as e:  # a picture for the eye only: its failure must not fail what was measured
        print(f"no picture of {nr.kind}'s tables ({type(e).__name__}: {e})")
        return []
    return [] if fig is None else [fig]


def _images(folder: Path) -> list[Path | Any]:
    """One image per figure (its PNG when it was also written as SVG or PDF), in name order."""
    if not folder.is_dir():
        return []
    by_stem: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.suffix in IMAGE_SUFFIXES and (p.stem not in by_stem or p.suffix == ".png"):
            by_stem[p.stem] = p
    return [by_stem[k] for k in sorted(by_stem)]


def _table_picture(run_dir: Path, kind: str) -> Any | None:
    import pandas as pd

    from offload_lab.paper import explore_plots

    # Shallow tables first, and a summary before the detail beside it.
    tables = sorted(run_dir.rglob("*.csv"), key=lambda p: (len(p.relative_to(run_dir).parts), p.stem != "summary",
                                                          str(p)))
    for path in tables:
        try:
            frame = pd.read_csv(path)
        except (ValueError, OSError):  # an empty or odd table: try the next
            continue
        if "experiment" not in frame.columns:  # plot_generic groups a campaign's tables by it
            frame = frame.assign(experiment=kind)
        frame = frame.drop(columns=[c for c in frame.columns if c in _COUNTERS])  # numbers, not measures
        fig = explore_plots.plot_generic(frame, str, title=f"{kind}: {path.relative_to(run_dir)}")
        if fig is not None:
            return fig
    return _latency_picture(run_dir, kind)


_COUNTERS = ("replicate", "repeat", "item_id", "item", "index", "seed", "row")


def _latency_picture(run_dir: Path, kind: str) -> Any | None:
    """Histograms of time to first token and time per output token over the run's ok requests (its events.jsonl
    files), for a run whose tables have too few rows to draw."""
    from offload_lab.paper import explore_plots

    events = [e for p in sorted(run_dir.rglob(runs.EVENTS)) for e in runs.read_events(p)
              if e.get("kind") == "request" and e.get("ok")]
    columns = [(key, label) for key, label in (("ttft_s", "time to first token (s)"),
                                               ("tpot_ms", "time per output token (ms)"))
               if any(isinstance(e.get(key), (int, float)) for e in events)]
    if not columns:
        return None
    fig, axes = explore_plots.new_figure(7.0, 2.6, ncols=len(columns))
    for ax, (key, label) in zip(axes, columns):
        values = [e[key] for e in events if isinstance(e.get(key), (int, float))]
        ax.hist(values, bins=min(30, max(5, len(values) // 2)), color=explore_plots.COLORS[0])
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
    axes[0].set_title(f"{kind}: {len(events)} ok requests", fontsize=9, loc="left")
    return fig


def show_figures(items: Any) -> None:
    """Show figures inline in a notebook: image files (PNG, SVG) and matplotlib figures; returns nothing, so a cell
    ending with it prints no list of paths. Outside IPython it does nothing."""
    try:
        from IPython import get_ipython
        from IPython.display import SVG, Image, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    for item in items or []:
        if isinstance(item, (str, Path)):
            path = Path(item)
            display(SVG(filename=str(path)) if path.suffix == ".svg" else Image(filename=str(path)))
        elif hasattr(item, "savefig"):
            # A Figure made outside pyplot has no inline display of its own: show it as a PNG.
            import io

            buf = io.BytesIO()
            item.savefig(buf, format="png", dpi=110)
            display(Image(data=buf.getvalue(), format="png"))
        else:
            display(item)
