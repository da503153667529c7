"""Executing a notebook: papermill with the project's kernel, started so that it never listens on plain TCP.

ipykernel 7.4 warns "Kernel is running over TCP without encryption" whenever the connection file it is handed says
``transport: tcp`` and carries no CurveZMQ key (``ipykernel/kernelapp.py``, ``IPKernelApp.init_sockets``; ipykernel
PR 1515). The kernel does not choose its transport: the kernel *manager* writes the connection file. So the warning is
avoided where the manager is configured, not filtered from the output:

- in the kernelspecs themselves: ``make envs`` (``--write-jupyter-config``) names :class:`IpcProvisioner` in the
  environment's kernel.json files (``metadata.kernel_provisioner``, an entry point of this package), so every client
  that starts the project's kernel (or ipykernel's ``python3`` of this environment) gets ipc transport: plain
  ``papermill``, which reads no Jupyter config file, ``jupyter execute``, nbconvert, JupyterLab and the runner;
- here, papermill also gets :func:`kernel_manager_config` as ``config`` (papermill hands extra keywords to nbclient,
  whose ``create_kernel_manager`` passes ``config`` on), and the same settings go into the environment's
  ``etc/jupyter/`` config files, for a kernelspec that names no provisioner.

Where the sockets go matters. jupyter_client names them after the connection file, but a manager that has none yet
(nbclient's, nbconvert's, papermill's) falls back to the *relative* prefix ``kernel-ipc``: the kernel binds it in its
own working directory (``notebooks/`` under nbconvert) while the client looks in its own, so the kernel never answers,
and every kernel started in one directory shares the prefix. :class:`IpcKernelManager` and :class:`IpcProvisioner` give
each kernel a unique absolute prefix in Jupyter's runtime directory. JupyterLab's server names a connection file for
every kernel itself, and the sockets go beside it. JupyterLab's default kernel is set to the project's as well.

Windows has no ipc transport for ZeroMQ; there the provisioner asks for manager-provisioned CurveZMQ keys instead
(``transport_encryption: auto``, jupyter_client >= 8.9, for kernelspecs that declare ``supported_encryption``).

A stop (Ctrl-C, SIGTERM, SIGHUP in the client) ends with offload-lab's own line: the provisioner lets the interrupted
cell's reply go out before the kernel shuts down (else ipykernel prints a ZMQError traceback), and the executor drops
the abandoned cell's error that asyncio would print (:func:`_forget_abandoned_cell`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
import tempfile
import uuid
from typing import Any, Callable, Mapping, Protocol

import zmq
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import default

from offload_lab.core.errors import ProducerError

KERNEL_NAME = "offload-lab"
KERNEL_DISPLAY_NAME = "Python (offload-lab)"
# The Jupyter applications whose kernels a user starts from this environment, by the config file each one reads.
SERVER_CONFIG = "jupyter_server_config.json"
JUPYTER_CONFIG_FILES = (SERVER_CONFIG, "jupyter_nbconvert_config.json", "jupyter_execute_config.json")


class CellWatcher(Protocol):
    """What a progress display gives the executor: nbclient's cell hooks and a sink for the kernel's stdout."""

    def hooks(self) -> Mapping[str, Callable[..., Any]]: ...

    def write(self, text: str) -> Any: ...

    def flush(self) -> None: ...


# A Unix socket's path holds at most 107 bytes (sun_path); a kernel's sockets are its prefix, "-" and a number.
SUN_PATH_MAX = 107
_PORT_SUFFIX = 6


def _fits(prefix: str) -> bool:
    return len(os.fsencode(prefix)) + _PORT_SUFFIX <= SUN_PATH_MAX


def _ipc_prefix(connection_file: str | None) -> str:
    """Where a kernel's Unix sockets go: beside its connection file, else a unique name in Jupyter's runtime folder;
    where that path is too long for a socket (a deep home or runtime folder: the kernel would fail with "File name too
    long"), a private folder of its own under the system's temporary folder."""
    if connection_file:
        prefix = os.path.splitext(connection_file)[0] + "-ipc"
    else:
        from jupyter_core.paths import jupyter_runtime_dir

        folder = jupyter_runtime_dir()
        os.makedirs(folder, exist_ok=True)
        prefix = os.path.join(folder, f"k-{uuid.uuid4().hex[:12]}-ipc")
    if _fits(prefix):
        return prefix
    return os.path.join(tempfile.mkdtemp(prefix="olk-"), f"k-{uuid.uuid4().hex[:12]}-ipc")


class IpcKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels listen on Unix sockets at a unique absolute path (see the module docstring)."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        if self.transport != "ipc":
            return super()._ip_default()
        return _ipc_prefix(self.connection_file)


IPC_MANAGER = "offload_lab.campaigns.execute.IpcKernelManager"  # by name: a config file holds it
PROVISIONER = "offload-lab-ipc"
SHUTDOWN_GRACE_S = 0.5  # its entry point's name (pyproject.toml), as the kernelspecs name it


class IpcProvisioner(LocalProvisioner):
    """The kernel provisioner the environment's kernelspecs name (``metadata.kernel_provisioner``): whichever
    manager starts the kernel (papermill's command line, which reads no Jupyter config file, nbconvert,
    ``jupyter execute``, JupyterLab, the runner), the kernel gets Unix sockets at a unique absolute path on POSIX, and
    manager-provisioned CurveZMQ keys elsewhere; either way it has no unencrypted TCP socket to warn about."""

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        if km is not None:
            if os.name == "posix":
                if km.transport != "ipc" or not os.path.isabs(str(km.ip)):
                    km.transport = "ipc"
                    km.ip = _ipc_prefix(km.connection_file)
                    km.cache_ports = False  # ports are a socket path's suffix under ipc, not TCP ports to reserve
            elif zmq.has("curve"):
                kwargs.setdefault("transport_encryption", "auto")
        return await super().pre_launch(**kwargs)

    async def send_signal(self, signum: int) -> None:
        await super().send_signal(signum)
        km = self.parent
        if signum == signal.SIGINT and getattr(km, "shutting_down", False):
            # A shutdown (Ctrl-C, SIGTERM or SIGHUP in the client) interrupts the kernel and at once asks it to stop:
            # the cell it interrupted then replies on sockets already closed, and ipykernel prints that ZMQError's
            # traceback. A moment lets the reply go out first.
            await asyncio.sleep(SHUTDOWN_GRACE_S)


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
    except BaseException:
        _forget_abandoned_cell()
        raise
    nb = nbformat.read(str(output), as_version=4)
    # Some failures are recorded only in the metadata (papermill #786): check it as well as the cells.
    exc = nb.metadata.get("papermill", {}).get("exception")
    errors = [c for c in nb.cells if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    if exc or errors:
        raise ProducerError(f"notebook {notebook.name} recorded an error; the output notebook is at {output}")


def _forget_abandoned_cell() -> None:
    """After a stop (a signal, Ctrl-C) nbclient's task for the cell it was running is abandoned; when the interrupted
    kernel answers, the task ends in CellExecutionError (or DeadKernelError) that nobody reads, and asyncio prints it
    with its traceback when the task is collected ("Task exception was never retrieved"). The stop is reported by
    offload-lab's own line: drop those two errors of abandoned tasks, pass on anything else."""
    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    loop = ensure_event_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (CellExecutionError, DeadKernelError)):
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def describe_kernels(prefix: Path | str | None = None) -> list[Path]:
    """Name :class:`IpcProvisioner` in every Python kernelspec of the environment at ``prefix`` (default: this
    interpreter's: ``offload-lab`` and ipykernel's ``python3``), keeping the rest of each. Returns the files written."""
    written = []
    for path in sorted((Path(prefix or sys.prefix) / "share" / "jupyter" / "kernels").glob("*/kernel.json")):
        spec = json.loads(path.read_text(encoding="utf-8"))
        if spec.get("language") != "python":
            continue
        spec.setdefault("metadata", {})["kernel_provisioner"] = {"provisioner_name": PROVISIONER, "config": {}}
        path.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def write_jupyter_config(prefix: Path | str | None = None) -> list[Path]:
    """Merge :func:`kernel_manager_config` into the Jupyter config files of the environment at ``prefix``
    (default: this interpreter's), keeping whatever else they hold, and name the provisioner in its kernelspecs
    (:func:`describe_kernels`). Returns the files written."""
    written = describe_kernels(prefix)
    folder = Path(prefix or sys.prefix) / "etc" / "jupyter"
    folder.mkdir(parents=True, exist_ok=True)
    for name in JUPYTER_CONFIG_FILES:
        path = folder / name
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        settings = kernel_manager_config()
        if name == SERVER_CONFIG:
            # JupyterLab's new notebooks and consoles start the project's kernel, not ipykernel's python3.
            settings = {**settings, "MappingKernelManager": {"default_kernel_name": KERNEL_NAME}}
        for section, values in settings.items():
            doc.setdefault(section, {}).update(values)
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


def _parameter(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"parameter {text[:80]!r} is not NAME=VALUE (the value is read as YAML)")
    from offload_lab.core.errors import InputError
    from offload_lab.core.inputs import parse_yaml_value

    try:
        return name, parse_yaml_value(value, f"parameter {name[:80]}")  # bounded: an alias bomb is refused
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    from offload_lab.core.errors import InputError
    from offload_lab.core.inputs import check_server_url
    from offload_lab.core.redact import url_outside_parameters

    code = 0
    params = dict(args.parameter)
    try:
        if params.get("base_url"):
            check_server_url(params["base_url"], "base_url")  # as `bench --url` checks it, before any kernel starts
        # The URL's credentials go to the kernel through its environment, never into the output notebook.
        with url_outside_parameters(params.get("base_url")) as shown:
            if shown:
                params["base_url"] = shown
            execute_notebook(args.notebook, args.output, params, args.cwd)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ProducerError as e:
        from offload_lab.core.redact import redact_text

        print(f"error: {redact_text(str(e))}", file=sys.stderr)
        code = 4
    finally:
        # However it ended: where the run went, with its output notebook kept beside its data.
        kept = keep_in_run(args.output) if args.output.is_file() else None
        if kept is not None:
            print(f"output notebook kept in the run directory: {kept}")
    return code


def run_directory_of(output: Path) -> Path | None:
    """The run a hand-run notebook made, from the line :func:`offload_lab.experiments.notebook.say_run_directory`
    printed into the output notebook (None for a notebook that makes no run, such as explore.ipynb)."""
    import nbformat

    from offload_lab.experiments.notebook import RUN_DIRECTORY

    nb = nbformat.read(str(output), as_version=4)
    for cell in reversed(nb.cells):
        for out in reversed(cell.get("outputs", [])):
            for line in reversed(str(out.get("text", "")).splitlines()):
                if line.startswith(RUN_DIRECTORY):
                    path = Path(line[len(RUN_DIRECTORY):].strip().rsplit(" (", 1)[0])
                    return path if (path / "manifest.json").is_file() else None
    return None


def keep_in_run(output: Path) -> Path | None:
    """Copy the output notebook into the run it made (``notebook.ipynb``, as the campaign runner keeps it) and add it
    to the finished run's manifest, so that the paper links a hand run to its notebook as it does a campaign's."""
    from offload_lab.campaigns.steps import OUTPUT_NOTEBOOK
    from offload_lab.core import runs

    run_dir = run_directory_of(output)
    if run_dir is None:
        return None
    manifest = runs.load_manifest(run_dir)
    if manifest.get("outcome") == "running" or not manifest.get("hand_run"):
        return None  # a campaign's run: its runner keeps the notebook itself
    target = run_dir / OUTPUT_NOTEBOOK
    if output.resolve() != target.resolve():
        runs.atomic_write_bytes(target, output.read_bytes())
    manifest.setdefault("files", {})[OUTPUT_NOTEBOOK] = {"sha256": runs.sha256_file(target),
                                                         "bytes": target.stat().st_size}
    nb = manifest.get("notebook")
    manifest["notebook"] = {**(nb if isinstance(nb, dict) else {"path": nb}), "output": OUTPUT_NOTEBOOK}
    runs.write_manifest(run_dir, manifest)
    return target


if __name__ == "__main__":
    raise SystemExit(main())
