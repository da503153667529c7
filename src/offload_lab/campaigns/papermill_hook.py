"""What papermill's own process does with parameters before a project notebook's kernel starts: bounded and redacted.

``papermill nb.ipynb out.ipynb -y '...'`` (or ``-f file.yaml``, ``-b base64``) loads the YAML in papermill's process and
writes each value as Python source into the injected cell (``papermill.translators``): a billion-laughs document
loads small (PyYAML shares an alias) but its source text is expanded in full, so papermill grows to gigabytes before
any kernel (and any check of the project's) exists. The same values go into the output notebook's metadata, so a
``base_url``/``url`` with ``user:password@`` typed after ``-p`` is written into the notebook as is.

papermill chooses the translator by the kernel's name (``papermill_translators.find_translator``), and it imports
every ``papermill.engine`` entry point when it is imported. This package names this module's :class:`Engine` there
(pyproject.toml), which is papermill's own nbclient engine unchanged; importing it registers
:class:`ProjectTranslator` for the project's kernel (every notebook in ``notebooks/`` names it) and
:class:`BoundedPythonTranslator` for ``python`` (the kernel the project falls back to where ``make envs`` did not
install its own). These translators:

* refuse parameters whose values, aliases expanded, number more than :data:`~offload_lab.core.inputs.YAML_MAX_NODES`
  or hold more than :data:`PARAMETERS_MAX_CHARS` characters, counted on the shared object graph (each object once) so
  the count never builds what it counts; the refusal is a usage error of papermill's command line (exit 2, one line
  naming the parameter) and an :class:`~offload_lab.core.errors.InputError` to a library caller;
* for the project's kernel only, move a server URL's credentials out of the parameters, as ``python -m
  offload_lab.campaigns.execute`` does: the parameter (and so the injected cell and the metadata) gets the redacted
  URL, the whole URL goes to the kernel in :data:`~offload_lab.core.redact.SERVER_URL_ENV`, where the notebook takes
  it back.

What it cannot reach: PyYAML's own loading of ``-y``/``-f``/``-b`` text in papermill's command line (aliases are shared
there, so a bomb loads small; ``-y`` is bounded by the command line's length, a ``-f`` file by nothing), a kernel
named with ``-k`` whose language is not Python. The outputs papermill writes into a project notebook's output are
redacted at every save by :class:`Engine`, which this module makes papermill's default.
"""

from __future__ import annotations

import os
from typing import Any

import click
from papermill.engines import NBClientEngine, papermill_engines
from papermill.translators import PythonTranslator, papermill_translators

from offload_lab.campaigns.execute import KERNEL_NAME
from offload_lab.core.errors import InputError
from offload_lab.core.inputs import YAML_MAX_NODES

# papermill and nbclient have imported jupyter_client, zmq and traitlets before this module: taking the kernel's
# name from the module that installs it costs nothing more.
PROJECT_KERNEL = KERNEL_NAME
PARAMETERS_MAX_CHARS = 4 * 2**20  # the text of every parameter together; the largest a project notebook takes is <1 kB
# The runner's server-URL parameter, before and after issue 36's rename.
URL_PARAMETERS = ("base_url", "url")


class ParametersRefused(InputError, click.UsageError):
    """Parameters too big to write into a notebook: exit 2 from papermill's command line, InputError to a caller."""

    def __init__(self, message: str) -> None:
        InputError.__init__(self, message)
        click.UsageError.__init__(self, message)

    def __str__(self) -> str:
        return self.message


def expanded_size(value: Any, limit_nodes: int = YAML_MAX_NODES,
                  limit_chars: int = PARAMETERS_MAX_CHARS) -> tuple[int, int]:
    """(values, characters) of ``value`` with every shared object counted each time it is reached, as its source
    text will be; each object's size is computed once (memoized by identity), so an alias bomb costs its node count."""
    memo: dict[int, tuple[int, int]] = {}
    keep: list[Any] = []  # ids stay unique while the objects are alive

    def size(v: Any, depth: int) -> tuple[int, int]:
        if depth > 200:
            raise ParametersRefused("a parameter nests more than 200 deep; no notebook parameter does")
        if isinstance(v, (str, bytes)):
            return 1, len(v)
        if not isinstance(v, (dict, list, tuple, set, frozenset)):
            return 1, 24  # a number, a bool, None, a date: a few characters of source
        key = id(v)
        if key in memo:
            return memo[key]
        memo[key] = (1, 2)  # a self-reference counts once (PyYAML's safe loader does not build one anyway)
        keep.append(v)
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else list(v)
        nodes, chars = 1, 2
        for x in items:
            n, c = size(x, depth + 1)
            nodes, chars = nodes + n, chars + c + 2
            if nodes > limit_nodes or chars > limit_chars:
                break  # over the bound already: the caller refuses it
        memo[key] = (nodes, chars)
        return nodes, chars

    return size(value, 0)


def check_parameters(parameters: dict[str, Any]) -> None:
    """Refuse parameters whose expanded source would be over the bounds, naming the first that is."""
    total_nodes = total_chars = 0
    for name, value in parameters.items():
        nodes, chars = expanded_size(value)
        total_nodes, total_chars = total_nodes + nodes, total_chars + chars
        if total_nodes > YAML_MAX_NODES or total_chars > PARAMETERS_MAX_CHARS:
            raise ParametersRefused(
                f"notebook parameter {str(name)[:80]!r}: more than {YAML_MAX_NODES:,} values or "
                f"{PARAMETERS_MAX_CHARS:,} characters once YAML aliases are expanded (refused as a YAML bomb before "
                "papermill writes it into the notebook); give a plain value")


def hide_url_credentials(parameters: dict[str, Any]) -> None:
    """In place (papermill stores this same dict in the output notebook's metadata): a server URL with credentials
    becomes its redacted form, the whole URL goes to the kernel's environment (inherited when papermill starts it)."""
    from offload_lab.core.redact import SERVER_URL_ENV, add_url_secrets, redact_url

    for name in URL_PARAMETERS:
        url = parameters.get(name)
        if isinstance(url, str) and redact_url(url) != url:
            add_url_secrets(url)
            os.environ[SERVER_URL_ENV] = url
            parameters[name] = redact_url(url)


class BoundedPythonTranslator(PythonTranslator):
    """papermill's Python translator, after :func:`check_parameters`: any Python kernel of this environment."""

    @classmethod
    def codify(cls, parameters: dict[str, Any], comment: str = "Parameters") -> str:
        check_parameters(parameters)
        return super().codify(parameters, comment)


class ProjectTranslator(BoundedPythonTranslator):
    """For the project's kernel only, whose notebooks take a hidden URL back (experiments.notebook): also
    :func:`hide_url_credentials`. Another notebook's ``url`` is left as given."""

    @classmethod
    def codify(cls, parameters: dict[str, Any], comment: str = "Parameters") -> str:
        check_parameters(parameters)
        if isinstance(parameters, dict):
            hide_url_credentials(parameters)
        return super().codify(parameters, comment)


class Engine(NBClientEngine):
    """papermill's nbclient engine, and papermill's default engine once this module is loaded; for the project's kernel
    every save of the output notebook is redacted (:func:`offload_lab.core.notebooks.redacted`), as
    ``campaigns.execute`` redacts its notebooks afterwards. papermill saves at each cell's start and end and every
    30 s: a run killed between two saves (SIGKILL, a lost pod) leaves on disk only what a save wrote, redacted, and
    the notebook papermill writes at the end is redacted in place first. Another kernel's notebook runs as under
    nbclient's engine."""

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        if kernel_name == PROJECT_KERNEL:
            _redact_saves(nb_man)
        return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)


def _redact_saves(nb_man: Any) -> None:
    from papermill.iorw import write_ipynb

    from offload_lab.core.notebooks import redacted

    def save(**_: Any) -> None:
        if nb_man.output_path:
            write_ipynb(redacted(nb_man.nb), nb_man.output_path)
        nb_man.last_save_time = nb_man.now()

    def complete(_complete: Any = nb_man.notebook_complete) -> None:
        # The executed notebook papermill returns (and writes once more) is the same object: cleaned where it is.
        clean = redacted(nb_man.nb)
        nb_man.nb.metadata, nb_man.nb.cells = clean.metadata, clean.cells
        _complete()

    nb_man.save, nb_man.notebook_complete = save, complete


papermill_engines.register(None, Engine)  # after papermill's own registration of its default
papermill_translators.register(PROJECT_KERNEL, ProjectTranslator)
papermill_translators.register("python", BoundedPythonTranslator)
