"""Executing a notebook: papermill with the project's kernel, started so that it never listens on plain TCP.

ipykernel 7.4 warns "Kernel is running over TCP without encryption" whenever the connection file it is handed says
``transport: tcp`` and carries no CurveZMQ key (``ipykernel/kernelapp.py``, ``IPKernelApp.init_sockets``; ipykernel
PR 1515). The kernel does not choose its transport: the kernel *manager* writes the connection file. So the warning is
avoided where the manager is configured, not filtered from the output:

- here, papermill gets :func:`kernel_manager_config` as ``config`` (papermill hands extra keywords to nbclient, whose
  ``create_kernel_manager`` passes ``config`` on): ipc transport, Unix sockets instead of TCP ports;
- for ``jupyter lab``, ``jupyter nbconvert --execute`` and ``jupyter execute``, ``make envs`` runs
  :func:`write_jupyter_config`, which puts the same settings in the environment's ``etc/jupyter/`` config files.

Where the sockets go matters. jupyter_client names them after the connection file, but a manager that has none yet
(nbclient's, nbconvert's, papermill's) falls back to the *relative* prefix ``kernel-ipc``: the kernel binds it in its
own working directory (``notebooks/`` under nbconvert) while the client looks in its own, so the kernel never answers,
and every kernel started in one directory shares the prefix. :class:`IpcKernelManager` gives each kernel a unique
absolute prefix in Jupyter's runtime directory; the config names it as nbclient's ``kernel_manager_class``. JupyterLab's
server names a connection file for every kernel itself, so its kernels take the plain ``KernelManager`` setting.

Windows has no ipc transport for ZeroMQ; there the manager provisions CurveZMQ keys instead
(``transport_encryption: auto``, jupyter_client >= 8.9, for kernelspecs that declare ``supported_encryption``).
The papermill command line reads no Jupyter config file, so plain ``papermill`` still warns: run notebooks through
``python -m offload_lab.campaigns.execute IN OUT -p NAME VALUE`` (or the campaign runner) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
import uuid
from typing import Any, Callable, Mapping, Protocol

from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from offload_lab.core.errors import ProducerError

KERNEL_NAME = "offload-lab"
KERNEL_DISPLAY_NAME = "Python (offload-lab)"
# The Jupyter applications whose kernels a user starts from this environment, by the config file each one reads.
JUPYTER_CONFIG_FILES = ("jupyter_server_config.json", "jupyter_nbconvert_config.json", "jupyter_execute_config.json")


class CellWatcher(Protocol):
    """What a progress display gives the executor: nbclient's cell hooks and a sink for the kernel's stdout."""

    def hooks(self) -> Mapping[str, Callable[..., Any]]: ...

    def write(self, text: str) -> Any: ...

    def flush(self) -> None: ...


class IpcKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels listen on Unix sockets at a unique absolute path (see the module docstring)."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        if self.transport != "ipc":
            return super()._ip_default()
        if self.connection_file:
            return os.path.splitext(self.connection_file)[0] + "-ipc"
        from jupyter_core.paths import jupyter_runtime_dir

        folder = jupyter_runtime_dir()
        os.makedirs(folder, exist_ok=True)
        # Short: a Unix socket's path may not be longer than about 100 bytes.
        return os.path.join(folder, f"k-{uuid.uuid4().hex[:12]}-ipc")


IPC_MANAGER = "offload_lab.campaigns.execute.IpcKernelManager"  # by name: a config file holds it


def kernel_manager_config() -> dict[str, Any]:
    """The settings under which a kernel has no unencrypted TCP socket to warn about."""
    if os.name == "posix":
        return {"KernelManager": {"transport": "ipc"}, "NotebookClient": {"kernel_manager_class": IPC_MANAGER}}
    return {"KernelManager": {"transport_encryption": "auto"}}


def kernel_name() -> str:
    """The project's named kernel when this environment has it (``make envs``), else ipykernel's own ``python3``,
    which runs in the current interpreter too (a conda environment where nobody ran ``ipykernel install``)."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL_NAME if KERNEL_NAME in KernelSpecManager().find_kernel_specs() else "python3"


def executed_cells(notebook: Path, parameters: Mapping[str, Any] | None = None) -> int:
    """How many cells papermill will execute: the non-empty code cells, plus the one it injects for parameters."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    cells = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
    return cells + (1 if parameters else 0)


def execute_notebook(notebook: Path, output: Path, parameters: dict[str, Any], cwd: Path,
                     watcher: CellWatcher | None = None) -> None:
    """Run a notebook with papermill; raise ProducerError on a failed cell, naming the cell and the error.

    ``watcher`` (a :class:`offload_lab.campaigns.progress.Progress`' notebook view) is told when each cell starts and
    ends, and reads the kernel's stdout as it comes; the output notebook keeps everything either way.
    """
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError
    from traitlets.config import Config

    extra: dict[str, Any] = {}
    if watcher is not None:
        extra = {**watcher.hooks(), "stdout_file": watcher}
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=kernel_name(), cwd=str(cwd),
            progress_bar=False, log_output=False, request_save_on_cell_execute=True,
            config=Config(kernel_manager_config()), **extra,
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


def write_jupyter_config(prefix: Path | str | None = None) -> list[Path]:
    """Merge :func:`kernel_manager_config` into the Jupyter config files of the environment at ``prefix``
    (default: this interpreter's), keeping whatever else they hold. Returns the files written."""
    folder = Path(prefix or sys.prefix) / "etc" / "jupyter"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in JUPYTER_CONFIG_FILES:
        path = folder / name
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        for section, values in kernel_manager_config().items():
            doc.setdefault(section, {}).update(values)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _parameter(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"parameter {text!r} is not NAME=VALUE (the value is read as YAML)")
    import yaml

    return name, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m offload_lab.campaigns.execute",
                                description="Run one notebook as papermill does, with the project's kernel over ipc.")
    p.add_argument("notebook", nargs="?", type=Path)
    p.add_argument("output", nargs="?", type=Path)
    p.add_argument("-p", "--parameter", action="append", type=_parameter, default=[], metavar="NAME=VALUE")
    p.add_argument("--cwd", type=Path, default=Path.cwd(), help="the kernel's working directory")
    p.add_argument("--write-jupyter-config", action="store_true",
                   help="write the ipc setting into this environment's etc/jupyter/ config files and exit")
    args = p.parse_args(argv)
    if args.write_jupyter_config:
        for path in write_jupyter_config():
            print(f"wrote {path}")
        return 0
    if args.notebook is None or args.output is None:
        p.error("give a notebook and an output path (or --write-jupyter-config)")
    if not args.notebook.is_file():
        p.error(f"notebook {args.notebook} does not exist")
    try:
        execute_notebook(args.notebook, args.output, dict(args.parameter), args.cwd)
    except ProducerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
